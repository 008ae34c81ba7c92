// The CUDA simulator's conv2d (KILN_CUDA=SIM, docs/simulator.md): cuDNN is not simulated, so in
// this build conv2d on a cuda device runs kiln's CPU kernels (kernels/cpu/conv2d/choice.cpp) on the
// simulated device memory, which is host memory, in the CPU kernels' dtypes. Each call goes
// through sim::library_call on the current stream, where cuDNN would launch its kernels: it counts
// as a library call, and on a capturing stream it is recorded to run at each launch of the graph.
// Replaces kernels/cuda/conv2d/ in this build only (CMakeLists.txt).
//
// It takes what cuDNN's table takes, so the ops above run as they do on a GPU: channels-last
// operands (copied to contiguous and back around the CPU kernels), and, for f32 with
// backends::cudnn_allow_tf32() (the default, as PyTorch's), TF32 tensor-core numerics: both
// operands rounded to TF32 (10 mantissa bits, to nearest with ties away from zero, as PTX's
// cvt.rna.tf32.f32), products summed in f32. cuDNN's own kernels may round differently, so this
// reproduces TF32's error, not its bits. Whether TF32 applies is decided when the op runs (at
// capture for a graph), as cuDNN fixes the math mode in the plan it launches.
//
// The backward passes sum in an order that changes from call to call unless
// backends::cudnn_deterministic() is on (sim::Schedule::varied_library_sums, KILN_SIM_VARIED_SUMS),
// as cuDNN's heuristics may pick nondeterministic algorithms for them (atomics across the
// output): the weight gradient's sum over the output rows is split in two at a row that changes
// from call to call (none, after row 1, 2, ..., OH - 1; the sequence starts where KILN_SIM_SEED
// puts it), each part summed by the CPU kernel and the two added; the input gradient's likewise
// over the output channels. So a byte-exact comparison of two runs that did not ask for
// determinism fails here as it may on a GPU.
//
// Each pass asks for a workspace where kiln's cuDNN paths (kernels/cuda/conv2d/conv2d.cpp,
// graph_api.cpp) allocate theirs, and handles one that cannot be had (a full device, or
// backends::fail_cudnn_workspaces) as they do: under the graph API (backends::cudnn_api() v9) the
// legacy API takes the call, counted as a fallback with its reason; the legacy API then runs an
// algorithm that needs no workspace. The CPU kernels need none, so only that is modelled.
#include "kiln/kernels/conv2d.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "kiln/core/backends.h"
#include "kiln/core/cuda.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/kernels/copy.h"
#include "kiln/kernels/cuda/simulator/borrowed.h"
#include "kiln/sim/grid.h"

namespace kiln {

namespace {

using sim_library::Borrowed;

float round_to_tf32(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) != 0x7f800000u) {  // inf and NaN pass as they are
    bits += 0x1000u;                          // half of the 13 bits dropped: ties away from zero
    bits &= ~0x1fffu;
  }
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

bool rounds_to_tf32(const Tensor& t) {
  return t.dtype() == DType::f32 && backends::cudnn_allow_tf32();
}

// A multiplied operand as the CPU kernels take it: contiguous, and TF32-rounded where cuDNN's
// tensor cores would round it. x itself when it is already so. A copy is host memory: the call
// may run inside any cudart call that waits for its stream (lazy streams, docs/simulator.md),
// the caching allocator's among them, so it must not allocate through that allocator, as a
// library's kernels never do.
Tensor cpu_operand(const Tensor& x, bool tf32) {
  if (!tf32 && x.is_contiguous()) return x;
  Tensor out = empty(x.shape(), x.dtype(), Device::cpu());
  CopyKernels::cpu.copy(x, out);
  if (!tf32) return out;
  float* data = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) data[i] = round_to_tf32(data[i]);
  return out;
}

// Runs `compute` into a contiguous buffer (host memory, as cpu_operand's) when `out` is laid out
// otherwise, then copies it there.
template <class F>
void into(const Tensor& out, F compute) {
  if (out.is_contiguous()) return compute(out);
  Tensor buffer = empty(out.shape(), out.dtype(), Device::cpu());
  compute(buffer);
  CopyKernels::cpu.copy(buffer, out);
}

// cuDNN has no double-precision kernels for NHWC operands (PyTorch's
// cudnn_conv_suggest_memory_format keeps f64 in NCHW for that reason): refused here as cuDNN
// refuses it, so that a path sending them fails in the simulator as it would on a GPU.
void require_cudnn_supports(const char* call, std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands)
    if (t->defined() && t->dim() == 4 && t->dtype() == DType::f64 && !t->is_contiguous())
      throw NotImplementedError(std::string(call) +
                                ": cuDNN has no f64 kernels for channels-last (NHWC) operands "
                                "(CUDNN_STATUS_NOT_SUPPORTED); the simulator refuses what cuDNN "
                                "refuses");
}

// Whether the backward passes sum in a varied order: decided when the op runs (at capture for a
// graph), as cuDNN fixes its algorithm in the plan it launches.
std::string& last_workspace_error() {
  static thread_local std::string text;
  return text;
}

bool varies_sums() {
  return sim::schedule().varied_library_sums && !backends::cudnn_deterministic();
}

// Where the next varied call of a pass (`calls` is the pass's count) splits its sum, 0 to
// options - 1 (0: not split): each call moves on by one, so two calls in a row never split alike.
int64_t next_split(std::atomic<uint64_t>& calls, int64_t options) {
  if (options < 2) return 0;
  const uint64_t k = calls.fetch_add(1, std::memory_order_relaxed) + sim::schedule().seed;
  return static_cast<int64_t>(k % static_cast<uint64_t>(options));
}
std::atomic<uint64_t> input_gradient_calls{0}, weight_gradient_calls{0};

// out += part, both contiguous host tensors of one floating dtype (the CPU kernels' f32 or f64).
void add_into(const Tensor& out, const Tensor& part) {
  if (out.dtype() == DType::f64) {
    double* o = out.data<double>();
    const double* p = part.data<double>();
    for (int64_t i = 0; i < out.numel(); ++i) o[i] += p[i];
  } else {
    float* o = out.data<float>();
    const float* p = part.data<float>();
    for (int64_t i = 0; i < out.numel(); ++i) o[i] += p[i];
  }
}

// A contiguous host copy of grad_out (contiguous, N x K x OH x OW) with the slab [begin, end) of
// dimension `dim` (1: output channels, 2: output rows) kept and every other element zero.
template <class T>
void keep_slab_of(const Tensor& in, const Tensor& out, int dim, int64_t begin, int64_t end) {
  const T* src = in.data<T>();
  T* dst = out.data<T>();
  const int64_t inner = dim == 1 ? in.shape()[2] * in.shape()[3] : in.shape()[3];
  const int64_t size = in.shape()[dim];
  for (int64_t i = 0; i < in.numel(); ++i) {
    const int64_t at = i / inner % size;
    dst[i] = at >= begin && at < end ? src[i] : T(0);
  }
}
Tensor keep_slab(const Tensor& grad_out, int dim, int64_t begin, int64_t end) {
  const Tensor out = empty(grad_out.shape(), grad_out.dtype(), Device::cpu());
  if (grad_out.dtype() == DType::f64)
    keep_slab_of<double>(grad_out, out, dim, begin, end);
  else
    keep_slab_of<float>(grad_out, out, dim, begin, end);
  return out;
}

// Both gradients are linear in grad_out: a pass over grad_out's slab [0, split) of dimension `dim`
// plus one over the rest is the same sum in another order (split 0: one pass).
template <class Pass>
void split_sum(const Tensor& cg, const Tensor& o, int dim, int64_t split, Pass pass) {
  if (split == 0) return pass(cg, o);
  pass(keep_slab(cg, dim, 0, split), o);
  const Tensor part = empty(o.shape(), o.dtype(), Device::cpu());
  pass(keep_slab(cg, dim, split, cg.shape()[dim]), part);
  add_into(o, part);
}

// The workspace the fastest algorithms of a pass ask for, modelled as an im2col buffer: the
// multiplied operand's columns for every output position.
int64_t workspace_bytes(const Conv2dGeometry& g, DType dtype) {
  return g.in_channels / (g.groups > 0 ? g.groups : 1) * g.kernel_h * g.kernel_w * g.out_h *
         g.out_w * dtype_size(dtype);
}

// Allocates `bytes` of workspace on `device` as kiln's cuDNN paths do; false when it cannot be had.
bool workspace_fits(int device, int64_t bytes) {
  try {
    if (backends::take_cudnn_workspace_failure())
      throw OutOfMemoryError(fmt::format(
          "cuDNN workspace of {} bytes on cuda:{}: failed as backends::fail_cudnn_workspaces asked",
          bytes, device));
    const Tensor workspace = empty({bytes}, DType::u8, Device::cuda(device));
    return true;
  } catch (const OutOfMemoryError& e) {
    last_workspace_error() = e.what();
    return false;
  }
}

// A pass's workspace, as the API backends::cudnn_api() names would get it (above).
void ask_for_workspace(const char* call, const Tensor& x, const Conv2dGeometry& g) {
  const int64_t bytes = workspace_bytes(g, x.dtype());
  if (bytes == 0) return;
  const int device = x.device().index;
  if (backends::cudnn_api() == backends::CudnnApi::v9) {
    if (workspace_fits(device, bytes)) return;
    backends::count_cudnn_fallback(fmt::format(
        "{} (cuDNN graph API): its plan's workspace of {} bytes did not fit ({}); this call ran on "
        "the legacy API",
        call, bytes, last_workspace_error()));
  }
  workspace_fits(device, bytes);  // else the legacy API's algorithm that needs none
}

void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
             const Conv2dGeometry& g) {
  require_cudnn_supports("cudnn convolution forward", {&x, &weight, &out});
  ask_for_workspace("cudnn convolution forward", x, g);
  sim::library_call(
      "cudnn convolution forward", cuda::current_stream_handle(),
      [x = Borrowed(x), weight = Borrowed(weight), bias = Borrowed(bias), out = Borrowed(out), g,
       tf32 = rounds_to_tf32(x)] {
        const Tensor cx = cpu_operand(*x, tf32), cw = cpu_operand(*weight, tf32);
        into(*out, [&](const Tensor& o) { Conv2dKernels::cpu.forward(cx, cw, *bias, o, g); });
      });
}

void backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                    const Conv2dGeometry& g) {
  require_cudnn_supports("cudnn convolution backward data", {&grad_out, &weight, &grad_x});
  ask_for_workspace("cudnn convolution backward data", grad_out, g);
  sim::library_call(
      "cudnn convolution backward data", cuda::current_stream_handle(),
      [grad_out = Borrowed(grad_out), weight = Borrowed(weight), grad_x = Borrowed(grad_x), g,
       tf32 = rounds_to_tf32(grad_out), varied = varies_sums()] {
        const Tensor cg = cpu_operand(*grad_out, tf32);
        const Tensor cw = cpu_operand(*weight, tf32);
        const int64_t split = varied ? next_split(input_gradient_calls, g.out_channels) : 0;
        into(*grad_x, [&](const Tensor& o) {
          split_sum(cg, o, 1, split, [&](const Tensor& part_g, const Tensor& part_o) {
            Conv2dKernels::cpu.backward_input(part_g, cw, part_o, g);
          });
        });
      });
}

void backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                     const Conv2dGeometry& g) {
  require_cudnn_supports("cudnn convolution backward filter", {&grad_out, &x, &grad_weight});
  ask_for_workspace("cudnn convolution backward filter", x, g);
  sim::library_call(
      "cudnn convolution backward filter", cuda::current_stream_handle(),
      [grad_out = Borrowed(grad_out), x = Borrowed(x), grad_weight = Borrowed(grad_weight), g,
       tf32 = rounds_to_tf32(grad_out), varied = varies_sums()] {
        const Tensor cg = cpu_operand(*grad_out, tf32), cx = cpu_operand(*x, tf32);
        const int64_t split = varied ? next_split(weight_gradient_calls, g.out_h) : 0;
        into(*grad_weight, [&](const Tensor& o) {
          split_sum(cg, o, 2, split, [&](const Tensor& part_g, const Tensor& part_o) {
            Conv2dKernels::cpu.backward_weight(part_g, cx, part_o, g);
          });
        });
      });
}

// takes_half false: f16 and bf16 reach the CPU kernels as f32 copies made by the op.
// takes_channels_last true, as cuDNN's.
const Conv2dKernels kSimulated{.forward = forward,
                               .backward_input = backward_input,
                               .backward_weight = backward_weight,
                               .takes_half = false,
                               .takes_channels_last = true};

}  // namespace

const Conv2dKernels* const Conv2dKernels::cuda = &kSimulated;

}  // namespace kiln
