// Which implementation runs each CPU convolution pass: the one decision point of the family.
//
// The candidates (conv2d_candidates) are the implementations that can run the problem here. Under
// backends::CpuConv::autotune each problem (pass, dtype, bias or not, ISA level, oneDNN on or
// off, sizes) is timed on every candidate the first time it is seen: kRounds runs each,
// interleaved so that a noisy neighbour slows them alike, except that after two rounds (the
// first run of each pays for its buffers) a candidate whose best is kDropFactor times the
// leader's runs no more; the fastest best is kept for the process. Every candidate
// computes the whole result, so a mistimed one can only be slower, never wrong, and the result of
// the timed call is always the kept one's (it runs once more when it was not the last to run).
//
// The rule, the fixed order of the candidates and the pick of CpuConv::rule, was measured inside
// ResNet-20's training steps on one AMD Zen 5 (AVX-512, AVX512-BF16; docs/results-history.md,
// "oneDNN per pass"): oneDNN first for f32, and for bf16 where the CPU has bf16 dot products,
// except
// - "narrow" layers (stride 1, at most 16 input and 16 output channels a group: ResNet's stem and
//   first stage), whose forward stays with kiln's position tiles, as does their input gradient
//   on AVX-512 (on AVX2 oneDNN's was faster);
// - the weight gradient, oneDNN's in f32 on AVX-512 only (kiln's AVX2 kernels were faster) and in
//   bf16 on narrow layers only (kiln's bf16 kernels were faster on the rest);
// - bf16 1x1 kernels on at most 64 channels in and out (ResNet-20's shortcuts).
// On an Intel Xeon with AMX oneDNN's bf16 outran it (issue 38): the reason for the timing.
#include "kiln/kernels/cpu/conv2d/choice.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/backends.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/core/dtype.h"
#include "kiln/core/half.h"
#include "kiln/core/tensor.h"
#include "kiln/kernels/conv2d.h"
#include "kiln/kernels/copy.h"
#include "kiln/kernels/cpu/conv2d/choice_file.h"
#include "kiln/kernels/cpu/conv2d/direct.h"
#include "kiln/kernels/cpu/conv2d/im2col.h"
#include "kiln/kernels/cpu/conv2d/onednn.h"
#include "kiln/kernels/layout.h"

namespace kiln::cpu {

namespace {

constexpr int kRounds = 3;
constexpr double kDropFactor = 2.5;
constexpr int kImpls = 4;

std::atomic<int64_t> runs[kImpls];
std::atomic<Conv2dTestClock> test_clock{nullptr};

bool rule_prefers_onednn(ConvPass pass, DType dtype, CpuIsa isa, const Conv2dGeometry& g) {
  const int64_t cg = g.in_channels / g.groups, og = g.out_channels / g.groups;
  if (dtype == DType::bf16 && g.kernel_h * g.kernel_w == 1 && cg <= 64 && og <= 64) return false;
  const bool narrow = g.stride_h == 1 && g.stride_w == 1 && cg <= 16 && og <= 16;
  switch (pass) {
    case ConvPass::forward:
      return !narrow;
    case ConvPass::input_grad:
      return !narrow || isa == CpuIsa::avx2;
    case ConvPass::weight_grad:
      return dtype == DType::f32 ? isa >= CpuIsa::avx512 : narrow;
  }
  return false;
}

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

template <class T>
void run_direct(const ConvCall& c) {
  switch (c.pass) {
    case ConvPass::forward:
      direct_conv2d_forward(c.a.data<T>(), c.b.data<T>(), data_or_null<T>(c.bias),
                            c.result.data<T>(), c.g);
      return;
    case ConvPass::input_grad:
      direct_conv2d_backward_input(c.a.data<T>(), c.b.data<T>(), c.result.data<T>(), c.g);
      return;
    case ConvPass::weight_grad:
      direct_conv2d_backward_weight(c.a.data<T>(), c.b.data<T>(), c.result.data<T>(), c.g);
      return;
  }
}

void run_im2col(const ConvCall& c) {
  switch (c.pass) {
    case ConvPass::forward:
      im2col_conv2d_forward(c.a, c.b, c.bias, c.result, c.g);
      return;
    case ConvPass::input_grad:
      im2col_conv2d_backward_input(c.a, c.b, c.result, c.g);
      return;
    case ConvPass::weight_grad:
      im2col_conv2d_backward_weight(c.a, c.b, c.result, c.g);
      return;
  }
}

// An f32 copy of a 16-bit operand (undefined stays undefined).
Tensor widened(const Tensor& t) {
  return t.defined() ? contiguous_with(CopyKernels::cpu, t, DType::f32) : Tensor();
}

void run_through_f32(const ConvCall& c) {
  const ConvCall wide{
      c.pass, widened(c.a), widened(c.b), widened(c.bias), empty(c.result.shape(), DType::f32),
      c.g};
  run_conv2d(wide);
  CopyKernels::cpu.copy(wide.result, c.result);
}

void run_impl(Conv2dImpl impl, const ConvCall& c) {
  switch (impl) {
    case Conv2dImpl::onednn:
      onednn_conv2d(c);
      break;
    case Conv2dImpl::direct:
      if (c.dtype() == DType::bf16)
        run_direct<BFloat16>(c);
      else
        run_direct<float>(c);
      break;
    case Conv2dImpl::im2col:
      run_im2col(c);
      break;
    case Conv2dImpl::through_f32:
      run_through_f32(c);
      break;
  }
  runs[static_cast<int>(impl)].fetch_add(1, std::memory_order_relaxed);
}

// keep_copy: oneDNN may read a blocked grad_output an earlier run left (onednn.h).
double timed_run(Conv2dImpl impl, const ConvCall& c, bool keep_copy = false) {
  if (!keep_copy) forget_onednn_conv2d_copies();
  const auto start = std::chrono::steady_clock::now();
  run_impl(impl, c);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Conv2dTestClock clock = test_clock.load(std::memory_order_relaxed);
  return clock != nullptr ? clock(impl, seconds) : seconds;
}

// The autotuner's memory: a problem's key, and its choice.
std::mutex choices_mutex;
std::map<std::vector<int64_t>, Conv2dImpl> kept_by_key;  // guarded by choices_mutex
std::vector<Conv2dChoice> choice_log;                    // guarded by choices_mutex
std::string choice_file;  // where choices are added, empty: nowhere; guarded by choices_mutex

// KILN_CPU_CONV_CACHE, read on the first autotuned call.
void use_choice_file_from_environment() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* path = std::getenv("KILN_CPU_CONV_CACHE");
    if (path != nullptr && *path != '\0') use_conv2d_choice_file(path);
  });
}

std::vector<int64_t> problem_key(const ConvCall& c, ConvPass pass) {
  std::vector<int64_t> key{static_cast<int64_t>(pass), static_cast<int64_t>(c.dtype()),
                           c.bias.defined(), static_cast<int64_t>(cpu_isa()),
                           backends::onednn_enabled()};
  const std::array<int64_t, 14> sizes = geometry_key(c.g);
  key.insert(key.end(), sizes.begin(), sizes.end());
  return key;
}

std::vector<int64_t> problem_key(const ConvCall& c) {
  return problem_key(c, c.pass);
}

// The choice kept for a problem, if any.
std::optional<Conv2dImpl> kept_choice(const std::vector<int64_t>& key) {
  const std::lock_guard<std::mutex> lock(choices_mutex);
  const auto found = kept_by_key.find(key);
  if (found == kept_by_key.end()) return std::nullopt;
  return found->second;
}

// Times the candidates on `c` (each run leaves a whole result in c.result) and leaves the
// fastest's result there; returns the choice.
Conv2dChoice measure(const ConvCall& c, const std::vector<Conv2dImpl>& candidates) {
  const size_t n = candidates.size();
  std::vector<double> best(n, std::numeric_limits<double>::infinity());
  std::vector<bool> live(n, true);
  size_t last = 0;
  // In a step, a weight gradient follows its convolution's input gradient on the same
  // grad_output: where that pass runs on oneDNN, oneDNN's weight gradient reads the blocked copy
  // it left, and is timed so (its first run makes the copy, the later ones read it).
  const bool after_onednn_input_grad =
      c.pass == ConvPass::weight_grad && kept_choice(problem_key(c, ConvPass::input_grad)) ==
                                             std::optional<Conv2dImpl>(Conv2dImpl::onednn);
  // A forward is timed as it would run with no weight gradient after it: oneDNN's copy of x
  // kept for one (ConvCall::keep_input) is made by the kept one's last run, below.
  ConvCall timed = c;
  timed.keep_input = false;
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < n; ++i) {
      if (!live[i]) continue;
      const bool keep_copy = after_onednn_input_grad && candidates[i] == Conv2dImpl::onednn;
      best[i] = std::min(best[i], timed_run(candidates[i], timed, keep_copy));
      last = i;
    }
    const double lead = *std::min_element(best.begin(), best.end());
    if (round == 0) continue;
    for (size_t i = 0; i < n; ++i) live[i] = live[i] && best[i] <= kDropFactor * lead;
  }
  // The first of the fastest: ties go to the rule's order.
  const size_t kept =
      static_cast<size_t>(std::min_element(best.begin(), best.end()) - best.begin());
  if (kept != last || (c.keep_input && candidates[kept] == Conv2dImpl::onednn))
    run_impl(candidates[kept], c);
  return {c.pass, c.dtype(), c.g, candidates, best, candidates[kept]};
}

// The forced pick's implementation where it can run the call, else the rule's. im2col runs f32
// too, but only when forced: 3 to 5 times slower than the direct kernels on every ResNet shape
// measured (docs/results.md), it would only make the autotuner's first step longer.
Conv2dImpl fixed_pick(backends::CpuConv pick, const ConvCall& c,
                      const std::vector<Conv2dImpl>& candidates) {
  if (pick == backends::CpuConv::im2col && c.dtype() == DType::f32) return Conv2dImpl::im2col;
  Conv2dImpl wanted = candidates.front();
  if (pick == backends::CpuConv::onednn) wanted = Conv2dImpl::onednn;
  if (pick == backends::CpuConv::direct) wanted = Conv2dImpl::direct;
  const bool runs_here =
      std::find(candidates.begin(), candidates.end(), wanted) != candidates.end();
  return runs_here ? wanted : candidates.front();
}

}  // namespace

const char* conv2d_impl_name(Conv2dImpl impl) {
  switch (impl) {
    case Conv2dImpl::onednn:
      return "onednn";
    case Conv2dImpl::direct:
      return "direct";
    case Conv2dImpl::im2col:
      return "im2col";
    case Conv2dImpl::through_f32:
      return "through_f32";
  }
  return "?";
}

std::vector<Conv2dImpl> conv2d_candidates(const ConvCall& c) {
  const DType dtype = c.dtype();
  if (dtype == DType::f64) return {Conv2dImpl::im2col};
  const bool onednn = onednn_conv2d_runs(c);
  const bool onednn_first = onednn && rule_prefers_onednn(c.pass, dtype, cpu_isa(), c.g);
  const bool direct =
      dtype == DType::f32 || (dtype == DType::bf16 && direct_conv2d_takes_bf16(c.g));
  std::vector<Conv2dImpl> candidates;
  if (onednn_first) candidates.push_back(Conv2dImpl::onednn);
  if (direct) candidates.push_back(Conv2dImpl::direct);
  if (onednn && !onednn_first) candidates.push_back(Conv2dImpl::onednn);
  if (candidates.empty()) candidates.push_back(Conv2dImpl::through_f32);
  return candidates;
}

bool weight_grad_on_onednn(const ConvCall& forward) {
  const ConvCall w{ConvPass::weight_grad, forward.a, forward.a, Tensor(), Tensor(), forward.g};
  const std::vector<Conv2dImpl> candidates = conv2d_candidates(w);
  const backends::CpuConv pick = backends::cpu_conv();
  if (candidates.size() == 1 || pick != backends::CpuConv::autotune)
    return fixed_pick(pick, w, candidates) == Conv2dImpl::onednn;
  const std::optional<Conv2dImpl> kept = kept_choice(problem_key(w));
  if (kept) return *kept == Conv2dImpl::onednn;
  return std::find(candidates.begin(), candidates.end(), Conv2dImpl::onednn) != candidates.end();
}

void run_conv2d(const ConvCall& c) {
  const std::vector<Conv2dImpl> candidates = conv2d_candidates(c);
  const backends::CpuConv pick = backends::cpu_conv();
  if (candidates.size() == 1 || pick != backends::CpuConv::autotune) {
    run_impl(fixed_pick(pick, c, candidates), c);
    return;
  }
  use_choice_file_from_environment();
  const std::vector<int64_t> key = problem_key(c);
  const std::optional<Conv2dImpl> kept = kept_choice(key);
  // A choice read from a file that can no longer run here (oneDNN gone) is timed again.
  if (kept && std::find(candidates.begin(), candidates.end(), *kept) != candidates.end()) {
    run_impl(*kept, c);
    return;
  }
  // Two threads meeting a new problem at once both time it; the last choice stays.
  Conv2dChoice choice = measure(c, candidates);
  const std::lock_guard<std::mutex> lock(choices_mutex);
  const Conv2dImpl chosen = choice.kept;
  kept_by_key.insert_or_assign(key, chosen);
  choice_log.push_back(std::move(choice));
  if (!choice_file.empty()) append_conv2d_choice(choice_file, key, chosen);
}

void use_conv2d_choice_file(const std::string& path) {
  const std::vector<std::pair<Conv2dChoiceKey, Conv2dImpl>> read = read_conv2d_choice_file(path);
  const std::lock_guard<std::mutex> lock(choices_mutex);
  for (const auto& [key, impl] : read) kept_by_key.insert_or_assign(key, impl);
  choice_file = path;
}

int64_t conv2d_runs(Conv2dImpl impl) {
  return runs[static_cast<int>(impl)].load(std::memory_order_relaxed);
}

std::vector<Conv2dChoice> conv2d_choices() {
  const std::lock_guard<std::mutex> lock(choices_mutex);
  return choice_log;
}

void clear_conv2d_choices() {
  const std::lock_guard<std::mutex> lock(choices_mutex);
  kept_by_key.clear();
  choice_log.clear();
  choice_file.clear();
}

void set_conv2d_test_clock(Conv2dTestClock clock) {
  test_clock.store(clock, std::memory_order_relaxed);
}

}  // namespace kiln::cpu

namespace kiln {

namespace {

void cpu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                 const Conv2dGeometry& g) {
  cpu::ConvCall c{cpu::ConvPass::forward, x, weight, bias, out, g};
  // Only for an x held beyond this call: a contiguous copy the op made (of a channels-last x)
  // dies with the call, and the weight gradient gets a copy of its own.
  c.keep_input = GradMode::is_enabled() && backends::onednn_keep_conv_inputs() &&
                 x.storage().use_count() > 1 && cpu::weight_grad_on_onednn(c);
  cpu::run_conv2d(c);
}

void cpu_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                        const Conv2dGeometry& g) {
  cpu::run_conv2d({cpu::ConvPass::input_grad, grad_out, weight, Tensor(), grad_x, g});
}

void cpu_backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                         const Conv2dGeometry& g) {
  cpu::run_conv2d({cpu::ConvPass::weight_grad, grad_out, x, Tensor(), grad_weight, g});
}

}  // namespace

const Conv2dKernels Conv2dKernels::cpu{.forward = cpu_forward,
                                       .backward_input = cpu_backward_input,
                                       .backward_weight = cpu_backward_weight,
                                       .takes_half = true,
                                       .takes_channels_last = false};

}  // namespace kiln
