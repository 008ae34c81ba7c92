// The CUDA simulator's conv2d (KILN_CUDA=SIM, docs/simulator.md): cuDNN is not simulated, so in
// this build conv2d on a cuda device runs kiln's CPU kernels (kernels/cpu/conv2d/choice.cpp) on the
// simulated device memory, which is host memory, in the CPU kernels' dtypes. Each call goes
// through sim::library_call on the current stream, where cuDNN would launch its kernels: it counts
// as a library call, and on a capturing stream it is recorded to run at each launch of the graph.
// Replaces kernels/cuda/conv2d/ in this build only (CMakeLists.txt).
//
// It takes what cuDNN's table takes, so the ops above run as they do on a GPU: f16 and bf16 as they
// are (widened to f32 copies around the CPU kernels, the result rounded back: cuDNN accumulates
// them in f32), channels-last operands (copied to contiguous and back), and, for f32 with
// backends::cudnn_allow_tf32() (the default, as PyTorch's) on a GPU of compute capability 8.0 or
// newer, TF32 tensor-core numerics: both operands rounded to TF32 (10 mantissa bits, to nearest
// with ties away from zero, as PTX's cvt.rna.tf32.f32), products summed in f32. cuDNN's own
// kernels may round differently, so this reproduces TF32's error, not its bits. TF32 tensor cores
// came with Ampere (8.0): on a Turing GPU (7.5, KILN_SIM_COMPUTE_CAPABILITY=75) cuDNN computes f32
// in f32 whatever the switch says, and so does this. Whether TF32 applies is decided when the op
// runs (at capture for a graph), as cuDNN fixes the math mode in the plan it launches.
//
// It refuses what cuDNN refuses of what kiln may send (require_cudnn_supports), with cuDNN's
// CUDNN_STATUS_NOT_SUPPORTED named, so a path that sends it fails here as on a GPU: f64 operands
// laid out channels-last (NHWC), and bf16 below compute capability 8.0 (cuDNN's bf16 kernels are
// Ampere's; PyTorch asks for them only at 8.0 and newer, CUDAHooks::
// supportsBFloat16ConvolutionWithCuDNNv8, and routes bf16 elsewhere below). ops/conv.cpp sends
// neither (takes_bf16 below tells it the second). f16 at 7.5, f64 in NCHW and every layout of f32
// cuDNN runs on every GPU CUDA 13 builds for (7.5 and newer).
//
// It refuses what kiln's cuDNN paths refuse during a CUDA-graph capture (require_plan): under the
// graph API (backends::cudnn_api() v9) a plan built for a problem this thread has not seen
// (graph_api.cpp's plan cache is per thread and keyed as conv2d_graph::plan_key, operand
// alignments included), and under the legacy API in benchmark mode an algorithm search for a
// problem the process has not seen (conv2d.cpp's cache: cudnnFind* runs and times every algorithm
// and synchronizes). The legacy API's heuristics only query, so a capture may list them. A
// capture without a warm-up step fails here as it would on a GPU.
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
#include <initializer_list>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kiln/core/backends.h"
#include "kiln/core/cuda.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/memory_format.h"
#include "kiln/kernels/conv2d_graph_plan.h"
#include "kiln/kernels/copy.h"
#include "kiln/kernels/cuda/simulator/borrowed.h"
#include "kiln/kernels/cuda/simulator/tf32.h"
#include "kiln/sim/grid.h"

namespace kiln {

namespace {

using sim_library::Borrowed;
using sim_library::round_to_tf32;

// The simulated GPU's compute capability (KILN_SIM_COMPUTE_CAPABILITY), as cuDNN reads it.
cuda::DeviceProperties gpu_of(int device) {
  return cuda::get_device_properties(device);
}

// cuDNN's bf16 kernels: compute capability 8.0 and newer (above). The table's takes_bf16.
bool takes_bf16(int device) {
  return gpu_of(device).major >= 8;
}

// TF32 tensor cores: Ampere (8.0) and newer; cuDNN computes f32 in f32 on an older GPU.
bool rounds_to_tf32(const Tensor& t) {
  return t.dtype() == DType::f32 && backends::cudnn_allow_tf32() &&
         sim_library::has_tf32(t.device().index);
}

bool is_half(DType dtype) {
  return dtype == DType::f16 || dtype == DType::bf16;
}

// The dtype the CPU kernels compute a cuDNN dtype in: f32 for f16 and bf16 (cuDNN accumulates
// them in f32), else itself.
DType cpu_dtype(DType dtype) {
  return is_half(dtype) ? DType::f32 : dtype;
}

// A multiplied operand (or the bias) as the CPU kernels take it: contiguous, f16 and bf16 widened
// to f32, and TF32-rounded where cuDNN's tensor cores would round it. x itself when it is already
// so; undefined for an undefined x. A copy is host memory: the call may run inside any cudart call
// that waits for its stream (lazy streams, docs/simulator.md), the caching allocator's among them,
// so it must not allocate through that allocator, as a library's kernels never do.
Tensor cpu_operand(const Tensor& x, bool tf32) {
  if (!x.defined()) return x;
  if (!tf32 && !is_half(x.dtype()) && x.is_contiguous()) return x;
  Tensor out = empty(x.shape(), cpu_dtype(x.dtype()), Device::cpu());
  CopyKernels::cpu.copy(x, out);
  if (!tf32) return out;
  float* data = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) data[i] = round_to_tf32(data[i]);
  return out;
}

// Runs `compute` into a contiguous buffer of the CPU kernels' dtype (host memory, as
// cpu_operand's) when `out` is laid out otherwise or is f16 or bf16, then copies it there
// (rounding to out's dtype).
template <class F>
void into(const Tensor& out, F compute) {
  if (out.is_contiguous() && !is_half(out.dtype())) return compute(out);
  Tensor buffer = empty(out.shape(), cpu_dtype(out.dtype()), Device::cpu());
  compute(buffer);
  CopyKernels::cpu.copy(buffer, out);
}

// What cuDNN refuses of what kiln may send, refused here as cuDNN refuses it (above), so that a
// path sending it fails in the simulator as it would on a GPU: f64 operands in NHWC (PyTorch's
// cudnn_conv_suggest_memory_format keeps f64 in NCHW for that reason), and bf16 below compute
// capability 8.0.
void require_cudnn_supports(const char* call, std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands) {
    if (!t->defined()) continue;
    if (t->dim() == 4 && t->dtype() == DType::f64 && !t->is_contiguous())
      throw NotImplementedError(std::string(call) +
                                ": cuDNN has no f64 kernels for channels-last (NHWC) operands "
                                "(CUDNN_STATUS_NOT_SUPPORTED); the simulator refuses what cuDNN "
                                "refuses");
    if (t->dtype() == DType::bf16) {
      const int device = t->device().index;
      const cuda::DeviceProperties gpu = gpu_of(device);
      if (gpu.major < 8)
        throw NotImplementedError(fmt::format(
            "{}: cuDNN has no bf16 kernels below compute capability 8.0, and cuda:{} ({}) is "
            "{}.{} (CUDNN_STATUS_NOT_SUPPORTED); the simulator refuses what cuDNN refuses",
            call, device, gpu.name, gpu.major, gpu.minor));
    }
  }
}

using conv2d_graph::Pass;

// One call's problem as kiln's cuDNN paths key their caches (conv2d_graph::plan_key): x, w and y
// are conv2d's input, weight and output, whichever of them the pass computes; the layout is NCHW
// when every operand is contiguous, else NHWC, as conv2d.cpp's require_operands decides.
conv2d_graph::PlanKeyInputs problem_of(Pass pass, const Tensor& x, const Tensor& w, const Tensor& y,
                                       const Conv2dGeometry& g) {
  conv2d_graph::PlanKeyInputs in;
  in.pass = pass;
  in.device = y.device().index;
  in.dtype = y.dtype();
  const bool contiguous = x.is_contiguous() && w.is_contiguous() && y.is_contiguous();
  in.format = contiguous ? MemoryFormat::contiguous : MemoryFormat::channels_last;
  in.geometry = g;
  in.allow_tf32 = backends::cudnn_allow_tf32();
  in.deterministic = backends::cudnn_deterministic();
  in.benchmark = backends::cudnn_benchmark();
  const auto alignment = [](const Tensor& t) {
    return conv2d_graph::byte_alignment(reinterpret_cast<uintptr_t>(t.data_ptr()));
  };
  in.alignments = {alignment(x), alignment(w), alignment(y)};
  return in;
}

// The legacy API's algorithm lists (conv2d.cpp's candidate cache: one per problem for the
// process, keyed without alignments). In benchmark mode listing times every algorithm
// (cudnnFind*), which a capture cannot hold, as conv2d.cpp's candidates_for says.
void require_legacy_list(conv2d_graph::PlanKeyInputs in) {
  static std::mutex mutex;
  static std::set<std::vector<int64_t>> listed;
  in.alignments = {};
  const std::vector<int64_t> key = conv2d_graph::plan_key(in);
  const std::lock_guard<std::mutex> lock(mutex);
  if (listed.count(key) > 0) return;
  if (in.benchmark)
    cuda::check_not_capturing(
        "a cuDNN legacy-API algorithm search for a problem not seen before (benchmark mode runs "
        "and times every algorithm with cudnnFind); run the step once before capturing it");
  listed.insert(key);
}

// The plan (graph API) or the algorithm list (legacy API) a pass needs, refused during a capture
// where kiln's path would build it there (above).
void require_plan(const conv2d_graph::PlanKeyInputs& in) {
  if (backends::cudnn_api() != backends::CudnnApi::v9) return require_legacy_list(in);
  // graph_api.cpp's plan cache, per thread (a plan is finalized with its thread's handle).
  thread_local std::set<std::vector<int64_t>> planned;
  const std::vector<int64_t> key = conv2d_graph::plan_key(in);
  if (planned.count(key) > 0) return;
  cuda::check_not_capturing(
      "a cuDNN graph-API plan built for a problem not seen before (it may time candidates and "
      "load kernels); run the step once before capturing it");
  planned.insert(key);
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

// A pass's workspace, as the API backends::cudnn_api() names would get it (above). A call the
// graph API hands to the legacy API needs that API's algorithm list too.
void ask_for_workspace(const char* call, const conv2d_graph::PlanKeyInputs& in) {
  const int64_t bytes = workspace_bytes(in.geometry, in.dtype);
  if (bytes == 0) return;
  const int device = in.device;
  if (backends::cudnn_api() == backends::CudnnApi::v9) {
    if (workspace_fits(device, bytes)) return;
    backends::count_cudnn_fallback(fmt::format(
        "{} (cuDNN graph API): its plan's workspace of {} bytes did not fit ({}); this call ran on "
        "the legacy API",
        call, bytes, last_workspace_error()));
    require_legacy_list(in);
  }
  workspace_fits(device, bytes);  // else the legacy API's algorithm that needs none
}

void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
             const Conv2dGeometry& g) {
  require_cudnn_supports("cudnn convolution forward", {&x, &weight, &out});
  const conv2d_graph::PlanKeyInputs problem = problem_of(Pass::forward, x, weight, out, g);
  require_plan(problem);
  ask_for_workspace("cudnn convolution forward", problem);
  sim::library_call("cudnn convolution forward", cuda::current_stream_handle(),
                    [x = Borrowed(x), weight = Borrowed(weight), bias = Borrowed(bias),
                     out = Borrowed(out), g, tf32 = rounds_to_tf32(x)] {
                      const Tensor cx = cpu_operand(*x, tf32), cw = cpu_operand(*weight, tf32);
                      const Tensor cb = cpu_operand(*bias, false);
                      into(*out,
                           [&](const Tensor& o) { Conv2dKernels::cpu.forward(cx, cw, cb, o, g); });
                    });
}

void backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                    const Conv2dGeometry& g) {
  require_cudnn_supports("cudnn convolution backward data", {&grad_out, &weight, &grad_x});
  const conv2d_graph::PlanKeyInputs problem =
      problem_of(Pass::backward_input, grad_x, weight, grad_out, g);
  require_plan(problem);
  ask_for_workspace("cudnn convolution backward data", problem);
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
  const conv2d_graph::PlanKeyInputs problem =
      problem_of(Pass::backward_weight, x, grad_weight, grad_out, g);
  require_plan(problem);
  ask_for_workspace("cudnn convolution backward filter", problem);
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

// As cuDNN's table: f16 and bf16 as they are (bf16 from compute capability 8.0 on), channels-last.
const Conv2dKernels kSimulated{.forward = forward,
                               .backward_input = backward_input,
                               .backward_weight = backward_weight,
                               .takes_half = true,
                               .takes_channels_last = true,
                               .takes_bf16 = takes_bf16};

}  // namespace

const Conv2dKernels* const Conv2dKernels::cuda = &kSimulated;

}  // namespace kiln
