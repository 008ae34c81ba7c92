// Process-wide switches of the math libraries, as torch.backends: they trade exactness or
// reproducibility for speed, or pick whose kernels run. Every build has them (a CPU-only build
// ignores them), so code and tests set them without #if. Reads and writes are atomic; a change
// applies to later calls.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::backends {

// f32 matmul/linear/bmm may use TF32 tensor cores (10-bit mantissa products). Default false, as
// torch.backends.cuda.matmul.allow_tf32.
bool cuda_matmul_allow_tf32();
void set_cuda_matmul_allow_tf32(bool allow);

// f32 conv2d may use TF32 tensor cores (inputs rounded to 10 mantissa bits, sums in f32). Default
// true, as PyTorch's torch.backends.cudnn.allow_tf32: f32 convolutions on a GPU then agree with
// the CPU to about 1e-3 relative, not to f32's 1e-6; turn it off (or use Tf32Scope) for that.
bool cudnn_allow_tf32();
void set_cudnn_allow_tf32(bool allow);

// conv2d picks its cuDNN algorithms by timing them (once per shape, then cached) instead of by
// cuDNN's heuristics. Default false, as torch.backends.cudnn.benchmark.
bool cudnn_benchmark();
void set_cudnn_benchmark(bool on);

// conv2d uses only algorithms that give bitwise-identical results run to run. Default false, as
// torch.backends.cudnn.deterministic.
bool cudnn_deterministic();
void set_cudnn_deterministic(bool on);

// scaled_dot_product_attention runs fused kernels where the device has them (the CPU: no L x S
// scores stored) and the call allows it; off, it always composes matmul and softmax (PyTorch's
// "math" backend, torch.backends.cuda.enable_math_sdp alone). Default true.
bool fused_attention_enabled();
void set_fused_attention_enabled(bool on);

// The optimizers' fused steps (foreach, kernels/cuda/optim.cu) on a GPU. They have run only on the
// CUDA simulator, and code that never ran on a GPU is not a default on one (docs/results.md,
// "Where each GPU path ran"): by default a GPU parameter steps op by op, with kernels that ran,
// and the first such step says so once on stderr. On: the fused kernels, as on the CPU. Default
// what the environment variable KILN_FUSED_OPTIMIZER (0 or 1) says when first read, else off.
// A capturable optimizer (CUDA graphs, itself opt-in) always uses them.
bool fused_optimizer_on_gpu();
void set_fused_optimizer_on_gpu(bool on);

// LSTM and GRU (nn/recurrent.h) run each step's cell as one fused op (ops/rnn_cell.h: one kernel
// forward, one backward) instead of composing it from sigmoid, tanh and elementwise ops. On the
// CPU the fused cell was faster in every measured shape (docs/results.md, "Recurrent cells"), so
// the default is true; off, every device composes (the reference). Default true.
bool fused_rnn_cell_enabled();
void set_fused_rnn_cell_enabled(bool on);
// On a GPU the fused cell runs only when this is on too: its kernels have run only on the CUDA
// simulator, and code that never ran on a GPU is not a default on one (docs/results.md, "Where
// each GPU path ran"). By default a GPU LSTM or GRU composes its cells, and the first one says so
// once on stderr. Default what the environment variable KILN_FUSED_RNN_CELL (0 or 1) says when
// first read, else off.
bool fused_rnn_cell_on_gpu();
void set_fused_rnn_cell_on_gpu(bool on);

// Which cuDNN API conv2d calls. v9: the graph (backend) API, engines ranked by cuDNN 9's
// heuristics (mode A), as PyTorch's default since its cuDNN v8 API; a problem whose graph or plan
// cuDNN rejects falls back to v7 for the rest of the process. v7: the legacy API
// (cudnnGet*Algorithm_v7, cudnnFind*AlgorithmEx under benchmark mode). Default v7, or what the
// environment variable KILN_CUDNN_API (v7 or v9) says when first read: v7 ran on a GPU (an H200,
// 13612cc) and v9 has not yet, and code that never ran on a GPU is not a default on one
// (docs/results.md, "Where each GPU path ran"); scripts/gpu-check.sh runs the convolution tests
// under v9 too, and a run that passes there is what may make it the default.
enum class CudnnApi { v7, v9 };
CudnnApi cudnn_api();
void set_cudnn_api(CudnnApi api);
const char* cudnn_api_name(CudnnApi api);
// "v7" or "v9"; anything else is a ValueError naming what came.
CudnnApi parse_cudnn_api(const std::string& name);

// How many conv2d passes (forward, input gradient, weight gradient) each API ran in this process,
// how many problems the v9 path handed to v7, and why the last one was. The CUDA kernels count;
// kiln-device-info prints them and tests check which path ran. The simulator runs neither API
// and counts nothing.
struct CudnnApiCounts {
  int64_t v9_runs = 0, v7_runs = 0, v9_fallbacks = 0;
  std::string last_fallback_reason;  // empty until a fallback
};
CudnnApiCounts cudnn_api_counts();
void count_cudnn_run(CudnnApi api);
void count_cudnn_fallback(const std::string& reason);

// Makes the next `count` workspace allocations of conv2d's cuDNN paths fail as on a full GPU (the
// OutOfMemoryError kiln's allocator raises), to test what handles it: the graph API hands such a
// call to the legacy API (counted as a fallback, above), and the legacy API runs the next algorithm
// whose workspace fits, or one that needs none. The CUDA simulator's cuDNN stand-in asks for a
// workspace as they do and honours it too. Default 0, or what the environment variable
// KILN_FAIL_CUDNN_WORKSPACE (a whole number) says when first read; anything else is a ValueError.
void fail_cudnn_workspaces(int count);
int failing_cudnn_workspaces();  // how many are still to fail
// From the paths that allocate a workspace: true (and one fewer to fail) when this one must fail.
bool take_cudnn_workspace_failure();

// CPU conv2d may hand a pass to oneDNN (which passes: cpu_conv below), and f32 matrix products go
// to oneDNN's sgemm (kernels/cpu/matmul.cpp; Eigen otherwise). Default true, as
// torch.backends.mkldnn.enabled, unless the environment variable KILN_ONEDNN is 0 when first read
// (1 or unset: true; anything else is a ValueError naming the variable). A build without oneDNN
// (onednn_available() false) runs kiln's kernels whatever this says.
bool onednn_available();
bool onednn_enabled();
void set_onednn_enabled(bool on);
// How many conv2d passes oneDNN ran in this process (tests check which path ran; a pass that
// kiln's kernels ran does not count).
int64_t onednn_conv2d_runs();
void count_onednn_conv2d_run();

// How CPU conv2d picks, per pass (forward, input gradient, weight gradient), dtype and shape, which
// of its implementations runs (kernels/cpu/conv2d/choice.cpp): kiln's direct kernels, oneDNN's, or
// im2col + GEMM. autotune times each one that can run the first time a problem is seen (a few
// runs, the fastest of each) and keeps the fastest for the process, as cudnn_benchmark does on a
// GPU: the right pick on every CPU (AMX, AVX-512, AVX2), at the cost of a few steps' time once.
// rule is a fixed choice made from the sizes alone, written for one Zen 5 (docs/results.md): the
// same kernels every run, for tests. onednn, direct and im2col run that implementation wherever it
// can run the problem and the rule elsewhere (tests and benchmarks of one implementation). Every
// pick computes the same convolution; they differ in speed and in the order of f32 sums. Default
// rule, or what the environment variable KILN_CPU_CONV (rule, autotune, onednn, direct, im2col)
// says when first read; kiln-train and the benchmarks set autotune unless told otherwise.
enum class CpuConv { rule, autotune, onednn, direct, im2col };
CpuConv cpu_conv();
void set_cpu_conv(CpuConv pick);
const char* cpu_conv_name(CpuConv pick);
// One of the names above; anything else is a ValueError listing them.
CpuConv parse_cpu_conv(const std::string& name);

// Sets the CPU conv2d pick for a scope and puts the old one back at its end.
class CpuConvScope {
 public:
  explicit CpuConvScope(CpuConv pick);
  ~CpuConvScope();
  CpuConvScope(const CpuConvScope&) = delete;
  CpuConvScope& operator=(const CpuConvScope&) = delete;

 private:
  CpuConv previous_;
};

// CPU conv2d: a forward that oneDNN runs with grad mode on keeps its copy of x in oneDNN's
// blocked layout for the weight gradient, where oneDNN will run that too, instead of that gradient
// reordering x again long after (from memory then, not cache). The copy lives until the weight
// gradient reads it or x is freed: ResNet-20's f32 training steps ran 4% faster on a Zen 5 and
// peaked at 221 MiB instead of 153; ResNet-50's ran level and peaked 14% higher (docs/results.md).
// Default true; off, no copy is kept, for the memory.
bool onednn_keep_conv_inputs();
void set_onednn_keep_conv_inputs(bool on);

// Sets the oneDNN switch for a scope and puts the old value back at its end, as PyTorch's
// torch.backends.mkldnn.flags(enabled=...).
class OneDnnScope {
 public:
  explicit OneDnnScope(bool on);
  ~OneDnnScope();
  OneDnnScope(const OneDnnScope&) = delete;
  OneDnnScope& operator=(const OneDnnScope&) = delete;

 private:
  bool previous_;
};

// Sets both TF32 switches for a scope and puts the old values back at its end, as PyTorch's
// torch.backends.cudnn.flags(allow_tf32=...) with the matmul switch beside it.
class Tf32Scope {
 public:
  explicit Tf32Scope(bool allow);
  ~Tf32Scope();
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  bool matmul_, cudnn_;
};

}  // namespace kiln::backends
