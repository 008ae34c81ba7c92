// conv2d on cuDNN. Each pass goes first to the graph API (graph_api.cpp) when
// backends::cudnn_api() is v9, the default, and to the legacy convolution API here when it is v7
// or when the graph API gave the problem up. On the legacy API the three passes share one shape
// of code, spelled out once through PassTraits: describe the problem, list the algorithms allowed
// to solve it (cached), and run the first one whose workspace can be allocated.
//
// Layouts: every operand NCHW, or every 4-D operand channels-last, described to cuDNN as NHWC
// (filters included), the layout its tensor-core kernels read without a transpose.
//
// Math types: f16/bf16 use tensor cores with f32 accumulation (the convolution descriptor computes
// in f32); f32 runs with CUDNN_FMA_MATH, which rules out TF32 tensor cores (CUDNN_DEFAULT_MATH
// would allow them on Ampere and later), unless backends::cudnn_allow_tf32(); f64 computes in f64.
// cuDNN's bf16 kernels need compute capability 8.0 (takes_bf16): ops/conv.cpp sends bf16 below it
// as f32, and a bf16 call that reaches here on such a GPU is refused by name, not left to cuDNN.
//
// A CUDA-graph capture cannot hold the legacy API's algorithm search in benchmark mode
// (cudnnFind* runs and times every algorithm, then synchronizes): for a problem not seen before it
// is refused during a capture, as the graph API refuses a new plan (graph_api.cpp); a warm-up step
// before the capture lists them. The heuristics only query, so a capture may list those.
#include "kiln/kernels/conv2d.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/core/backends.h"
#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/kernels/conv2d_graph_plan.h"
#include "kiln/kernels/cuda/conv2d/graph_api.h"
#include "kiln/kernels/cuda/handles.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::cuda {

namespace {

class TensorDescriptor {
 public:
  TensorDescriptor() { KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_)); }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(desc_); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  operator cudnnTensorDescriptor_t() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

class FilterDescriptor {
 public:
  FilterDescriptor() { KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc_)); }
  ~FilterDescriptor() { cudnnDestroyFilterDescriptor(desc_); }
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  operator cudnnFilterDescriptor_t() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor() { KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc_)); }
  ~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(desc_); }
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  operator cudnnConvolutionDescriptor_t() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

// The math type the descriptor asks for when algorithms are listed.
cudnnMathType_t requested_math(DType dtype) {
  if (dtype == DType::f16 || dtype == DType::bf16) return CUDNN_TENSOR_OP_MATH;
  if (dtype == DType::f32 && !backends::cudnn_allow_tf32()) return CUDNN_FMA_MATH;
  return CUDNN_DEFAULT_MATH;
}

// The math type to run an algorithm that cuDNN reported with `reported`, or false when the
// switches forbid it.
bool allowed_math(DType dtype, cudnnMathType_t reported, cudnnMathType_t* run_with) {
  // Conversion lets cuDNN round operands to f16: only f16 data has nothing to lose by it.
  if (reported == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && dtype != DType::f16) return false;
  if (dtype == DType::f32 && !backends::cudnn_allow_tf32()) {
    if (reported == CUDNN_TENSOR_OP_MATH) return false;
    *run_with = CUDNN_FMA_MATH;
    return true;
  }
  *run_with = reported;
  return true;
}

// cuDNN's bf16 kernels are Ampere's (compute capability 8.0); PyTorch asks cuDNN for bf16 only
// there (CUDAHooks::supportsBFloat16ConvolutionWithCuDNNv8). An attribute read, cheap per call.
bool takes_bf16(int device) {
  int major = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;
}

bool is_not_supported(cudnnStatus_t status) {
  // cuDNN 9 numbers every "not supported" reason 3000-3999.
  return status >= CUDNN_STATUS_NOT_SUPPORTED && status < CUDNN_STATUS_NOT_SUPPORTED + 1000;
}

cudnnTensorFormat_t cudnn_layout(MemoryFormat format) {
  return format == MemoryFormat::channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

int as_int(int64_t value) {
  return static_cast<int>(value);  // ConvProblem checked the range
}

// One convolution as cuDNN sees it. x, w and y are conv2d's input, weight and output, whichever of
// them the pass computes (the gradient passes write into x or w and read the gradient from y).
struct ConvProblem {
  ConvProblem(const char* op, DType dtype, int device, MemoryFormat format,
              const Conv2dGeometry& geometry, void* x_ptr, void* w_ptr, void* y_ptr)
      : op(op),
        dtype(dtype),
        device(device),
        format(format),
        g(geometry),
        x(x_ptr),
        w(w_ptr),
        y(y_ptr) {
    const int64_t limit = INT_MAX;
    for (int64_t v : {g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dilation_h, g.dilation_w})
      KILN_CHECK(v <= limit, NotImplementedError,
                 "{}: cuDNN takes strides, paddings and dilations below 2^31, got {}", op, v);
    const int64_t x_numel = g.batch * g.in_channels * g.in_h * g.in_w;
    const int64_t w_numel = g.out_channels * (g.in_channels / g.groups) * g.kernel_h * g.kernel_w;
    const int64_t y_numel = g.batch * g.out_channels * g.out_h * g.out_w;
    KILN_CHECK(x_numel <= limit && w_numel <= limit && y_numel <= limit, NotImplementedError,
               "{}: cuDNN's convolution takes tensors of fewer than 2^31 elements; got input [{}, "
               "{}, {}, {}] and output [{}, {}, {}, {}] (split the batch)",
               op, g.batch, g.in_channels, g.in_h, g.in_w, g.batch, g.out_channels, g.out_h,
               g.out_w);
    const cudnnDataType_t type = cudnn_data_type(dtype, op);
    const cudnnTensorFormat_t layout = cudnn_layout(format);
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_desc, layout, type, as_int(g.batch),
                                                as_int(g.in_channels), as_int(g.in_h),
                                                as_int(g.in_w)));
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_desc, layout, type, as_int(g.batch),
                                                as_int(g.out_channels), as_int(g.out_h),
                                                as_int(g.out_w)));
    KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc, type, layout, as_int(g.out_channels),
                                                as_int(g.in_channels / g.groups),
                                                as_int(g.kernel_h), as_int(g.kernel_w)));
    KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv_desc, as_int(g.pad_h), as_int(g.pad_w), as_int(g.stride_h), as_int(g.stride_w),
        as_int(g.dilation_h), as_int(g.dilation_w), CUDNN_CROSS_CORRELATION,
        dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_desc, as_int(g.groups)));
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc, requested_math(dtype)));
    handle = cudnn_handle(device);
  }

  const char* op;
  DType dtype;
  int device;
  MemoryFormat format;
  Conv2dGeometry g;
  void* x;
  void* w;
  void* y;
  cudnnHandle_t handle = nullptr;
  TensorDescriptor x_desc, y_desc;
  FilterDescriptor w_desc;
  ConvolutionDescriptor conv_desc;
};

using conv2d_graph::Pass;

template <Pass P>
struct PassTraits;

template <>
struct PassTraits<Pass::forward> {
  using Algo = cudnnConvolutionFwdAlgo_t;
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr int kAlgoCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static cudnnStatus_t heuristics(const ConvProblem& p, int n, int* got, Perf* perf) {
    return cudnnGetConvolutionForwardAlgorithm_v7(p.handle, p.x_desc, p.w_desc, p.conv_desc,
                                                  p.y_desc, n, got, perf);
  }
  static cudnnStatus_t find(const ConvProblem& p, int n, int* got, Perf* perf, void* workspace,
                            size_t bytes) {
    return cudnnFindConvolutionForwardAlgorithmEx(p.handle, p.x_desc, p.x, p.w_desc, p.w,
                                                  p.conv_desc, p.y_desc, p.y, n, got, perf,
                                                  workspace, bytes);
  }
  static cudnnStatus_t workspace_bytes(const ConvProblem& p, Algo algo, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(p.handle, p.x_desc, p.w_desc, p.conv_desc,
                                                   p.y_desc, algo, bytes);
  }
  static cudnnStatus_t run(const ConvProblem& p, Algo algo, void* workspace, size_t bytes,
                           const void* alpha, const void* beta) {
    return cudnnConvolutionForward(p.handle, alpha, p.x_desc, p.x, p.w_desc, p.w, p.conv_desc, algo,
                                   workspace, bytes, beta, p.y_desc, p.y);
  }
};

template <>
struct PassTraits<Pass::backward_input> {
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr int kAlgoCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static cudnnStatus_t heuristics(const ConvProblem& p, int n, int* got, Perf* perf) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(p.handle, p.w_desc, p.y_desc, p.conv_desc,
                                                       p.x_desc, n, got, perf);
  }
  static cudnnStatus_t find(const ConvProblem& p, int n, int* got, Perf* perf, void* workspace,
                            size_t bytes) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(p.handle, p.w_desc, p.w, p.y_desc, p.y,
                                                       p.conv_desc, p.x_desc, p.x, n, got, perf,
                                                       workspace, bytes);
  }
  static cudnnStatus_t workspace_bytes(const ConvProblem& p, Algo algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(p.handle, p.w_desc, p.y_desc, p.conv_desc,
                                                        p.x_desc, algo, bytes);
  }
  static cudnnStatus_t run(const ConvProblem& p, Algo algo, void* workspace, size_t bytes,
                           const void* alpha, const void* beta) {
    return cudnnConvolutionBackwardData(p.handle, alpha, p.w_desc, p.w, p.y_desc, p.y, p.conv_desc,
                                        algo, workspace, bytes, beta, p.x_desc, p.x);
  }
};

template <>
struct PassTraits<Pass::backward_weight> {
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  static constexpr int kAlgoCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static cudnnStatus_t heuristics(const ConvProblem& p, int n, int* got, Perf* perf) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(p.handle, p.x_desc, p.y_desc, p.conv_desc,
                                                         p.w_desc, n, got, perf);
  }
  static cudnnStatus_t find(const ConvProblem& p, int n, int* got, Perf* perf, void* workspace,
                            size_t bytes) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(p.handle, p.x_desc, p.x, p.y_desc, p.y,
                                                         p.conv_desc, p.w_desc, p.w, n, got, perf,
                                                         workspace, bytes);
  }
  static cudnnStatus_t workspace_bytes(const ConvProblem& p, Algo algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(p.handle, p.x_desc, p.y_desc, p.conv_desc,
                                                          p.w_desc, algo, bytes);
  }
  static cudnnStatus_t run(const ConvProblem& p, Algo algo, void* workspace, size_t bytes,
                           const void* alpha, const void* beta) {
    return cudnnConvolutionBackwardFilter(p.handle, alpha, p.x_desc, p.x, p.y_desc, p.y,
                                          p.conv_desc, algo, workspace, bytes, beta, p.w_desc, p.w);
  }
};

// An algorithm allowed for one problem, with the math type it runs in and the workspace it needs.
struct Candidate {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace_bytes = 0;
};

// The candidates depend on the problem and on the switches, so all of them are in the key (the
// legacy descriptors promise no alignment: zeros there).
using CacheKey = std::vector<int64_t>;

CacheKey cache_key(Pass pass, const ConvProblem& p) {
  conv2d_graph::PlanKeyInputs in;
  in.pass = pass;
  in.device = p.device;
  in.dtype = p.dtype;
  in.format = p.format;
  in.geometry = p.g;
  in.allow_tf32 = backends::cudnn_allow_tf32();
  in.deterministic = backends::cudnn_deterministic();
  in.benchmark = backends::cudnn_benchmark();
  return conv2d_graph::plan_key(in);
}

struct CandidateCache {
  std::mutex mutex;
  std::map<CacheKey, std::vector<Candidate>> entries;
};

CandidateCache& candidate_cache() {
  static CandidateCache cache;
  return cache;
}

Tensor workspace(int device, size_t bytes) {
  if (bytes > 0 && backends::take_cudnn_workspace_failure())
    throw OutOfMemoryError(fmt::format(
        "cuDNN workspace of {} bytes on cuda:{}: failed as backends::fail_cudnn_workspaces asked",
        bytes, device));
  return empty({static_cast<int64_t>(bytes)}, DType::u8, Device::cuda(device));
}

// Times every algorithm on the problem's own buffers (the output is overwritten, as the real run
// will do). Find only times algorithms whose workspace fits the buffer it is given: it gets the
// largest any algorithm asks for, or the next smaller size when that cannot be allocated.
template <Pass P>
std::vector<typename PassTraits<P>::Perf> measure(const ConvProblem& p) {
  using Traits = PassTraits<P>;
  std::vector<size_t> sizes{0};
  for (int a = 0; a < Traits::kAlgoCount; ++a) {
    size_t bytes = 0;
    if (Traits::workspace_bytes(p, static_cast<typename Traits::Algo>(a), &bytes) ==
        CUDNN_STATUS_SUCCESS)
      sizes.push_back(bytes);
  }
  std::sort(sizes.begin(), sizes.end(), std::greater<size_t>());
  Tensor buffer;
  size_t buffer_bytes = 0;
  for (size_t bytes : sizes) {
    try {
      buffer = workspace(p.device, bytes);
      buffer_bytes = bytes;
      break;
    } catch (const OutOfMemoryError&) {
    }
  }
  std::vector<typename Traits::Perf> perf(Traits::kAlgoCount);
  int got = 0;
  KILN_CUDNN_CHECK(Traits::find(p, Traits::kAlgoCount, &got, perf.data(),
                                buffer_bytes > 0 ? buffer.data_ptr() : nullptr, buffer_bytes));
  perf.resize(got);
  return perf;
}

// cuDNN's ranked list (fastest first), or the measured one, reduced to what the switches allow,
// each with the workspace its math type needs.
template <Pass P>
std::vector<Candidate> list_candidates(const ConvProblem& p) {
  using Traits = PassTraits<P>;
  std::vector<typename Traits::Perf> perf;
  if (backends::cudnn_benchmark()) {
    perf = measure<P>(p);
  } else {
    perf.resize(Traits::kAlgoCount);
    int got = 0;
    KILN_CUDNN_CHECK(Traits::heuristics(p, Traits::kAlgoCount, &got, perf.data()));
    perf.resize(got);
  }
  const bool deterministic = backends::cudnn_deterministic();
  std::vector<Candidate> candidates;
  for (const auto& result : perf) {
    if (result.status != CUDNN_STATUS_SUCCESS) continue;
    if (deterministic && result.determinism != CUDNN_DETERMINISTIC) continue;
    Candidate c;
    c.algo = static_cast<int>(result.algo);
    if (!allowed_math(p.dtype, result.mathType, &c.math)) continue;
    const bool seen = std::any_of(candidates.begin(), candidates.end(), [&](const Candidate& o) {
      return o.algo == c.algo && o.math == c.math;
    });
    if (seen) continue;
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv_desc, c.math));
    if (Traits::workspace_bytes(p, result.algo, &c.workspace_bytes) != CUDNN_STATUS_SUCCESS)
      continue;
    candidates.push_back(c);
  }
  return candidates;
}

template <Pass P>
std::vector<Candidate> candidates_for(const ConvProblem& p) {
  const CacheKey key = cache_key(P, p);
  CandidateCache& cache = candidate_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.entries.find(key);
    if (it != cache.entries.end()) return it->second;
  }
  if (backends::cudnn_benchmark())
    cuda::check_not_capturing(
        "a cuDNN legacy-API algorithm search for a problem not seen before (benchmark mode runs "
        "and times every algorithm with cudnnFind); run the step once before capturing it");
  // Listed outside the lock: a measured search takes a while, and two threads that race here
  // store equivalent lists.
  std::vector<Candidate> candidates = list_candidates<P>(p);
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.entries.emplace(key, candidates);
  return candidates;
}

std::string describe_problem(const ConvProblem& p) {
  return conv2d_graph::describe_problem(p.g, p.format, p.dtype, p.device);
}

// Runs the first candidate whose workspace can be allocated and that cuDNN accepts. An
// out-of-memory error surfaces only when no candidate fits.
template <Pass P>
void run_pass(const ConvProblem& p) {
  using Traits = PassTraits<P>;
  const std::vector<Candidate> candidates = candidates_for<P>(p);
  const double alpha_f64 = 1.0, beta_f64 = 0.0;
  const float alpha_f32 = 1.0f, beta_f32 = 0.0f;
  const bool f64 = p.dtype == DType::f64;  // cuDNN reads the scalars as double only for f64 data
  const void* alpha = f64 ? static_cast<const void*>(&alpha_f64) : &alpha_f32;
  const void* beta = f64 ? static_cast<const void*>(&beta_f64) : &beta_f32;
  std::exception_ptr out_of_memory;
  size_t failed_bytes = SIZE_MAX;  // the smallest workspace that could not be allocated
  cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
  for (const Candidate& c : candidates) {
    if (c.workspace_bytes >= failed_bytes) continue;
    Tensor buffer;
    if (c.workspace_bytes > 0) {
      try {
        buffer = workspace(p.device, c.workspace_bytes);
      } catch (const OutOfMemoryError&) {
        out_of_memory = std::current_exception();
        failed_bytes = c.workspace_bytes;
        continue;
      }
    }
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv_desc, c.math));
    const cudnnStatus_t status = Traits::run(p, static_cast<typename Traits::Algo>(c.algo),
                                             c.workspace_bytes > 0 ? buffer.data_ptr() : nullptr,
                                             c.workspace_bytes, alpha, beta);
    if (status == CUDNN_STATUS_SUCCESS) return;
    if (!is_not_supported(status))
      throw Error(fmt::format("{}: cuDNN error {} running algorithm {} for {}", p.op,
                              cudnnGetErrorString(status), c.algo, describe_problem(p)));
    last = status;
  }
  if (out_of_memory) std::rethrow_exception(out_of_memory);
  throw NotImplementedError(fmt::format(
      "{}: cuDNN has no usable algorithm for {} (deterministic = {}, tf32 = {}; {} candidates{}{})",
      p.op, describe_problem(p), backends::cudnn_deterministic(), backends::cudnn_allow_tf32(),
      candidates.size(), last == CUDNN_STATUS_SUCCESS ? "" : ", last status ",
      last == CUDNN_STATUS_SUCCESS ? "" : cudnnGetErrorString(last)));
}

// Checks the operands and answers their layout: NCHW when every one is contiguous, else NHWC,
// which every 4-D one must then be dense in (a bias is 1-D).
MemoryFormat require_operands(const char* op, std::initializer_list<const Tensor*> tensors,
                              const Tensor& out) {
  const DType dtype = out.dtype();
  cudnn_data_type(dtype, op);
  if (dtype == DType::bf16 && !takes_bf16(out.device().index)) {
    const DeviceProperties gpu = get_device_properties(out.device().index);
    throw NotImplementedError(fmt::format(
        "{}: cuDNN has no bf16 kernels below compute capability 8.0, and {} ({}) is {}.{}; "
        "conv2d computes bf16 there in f32 (ops/conv.cpp)",
        op, out.device().str(), gpu.name, gpu.major, gpu.minor));
  }
  bool all_contiguous = true;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    KILN_CHECK(t->dtype() == dtype && t->device() == out.device(), ValueError,
               "{}: expected {} tensors on {}, got {}", op, dtype_name(dtype), out.device().str(),
               describe(*t));
    all_contiguous = all_contiguous && t->is_contiguous();
  }
  const MemoryFormat format =
      all_contiguous ? MemoryFormat::contiguous : MemoryFormat::channels_last;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    const MemoryFormat own = t->dim() == 4 ? format : MemoryFormat::contiguous;
    KILN_CHECK(t->is_contiguous(own), ValueError,
               "{}: expected every operand contiguous, or every 4-D one channels-last, got {} "
               "(strides {})",
               op, describe(*t), shape_str(t->strides()));
  }
  return format;
}

// ops/conv.cpp settles every zero-size case itself (cuDNN rejects zero-size descriptors);
// reaching here with one is a bug in the caller.
void require_non_empty(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    KILN_CHECK(t->numel() > 0, Error, "{}: internal error: the cuDNN path got an empty operand {}",
               op, describe(*t));
}

// The graph API when backends::cudnn_api() asks for it and it takes the problem, else the legacy
// API; either way counted in backends::cudnn_api_counts().
template <Pass P>
void run_either(const char* op, DType dtype, int device, MemoryFormat format,
                const Conv2dGeometry& g, void* x, void* w, void* y) {
  if (backends::cudnn_api() == backends::CudnnApi::v9 &&
      run_conv2d_graph_api({op, P, dtype, device, format, g, x, w, y})) {
    backends::count_cudnn_run(backends::CudnnApi::v9);
    return;
  }
  const ConvProblem p(op, dtype, device, format, g, x, w, y);
  run_pass<P>(p);
  backends::count_cudnn_run(backends::CudnnApi::v7);
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const Conv2dGeometry& g) {
  const MemoryFormat format = require_operands("conv2d_forward", {&x, &weight, &bias, &out}, out);
  require_non_empty("conv2d_forward", {&x, &weight, &out});
  const int device = out.device().index;
  const cuda::DeviceGuard guard(device);
  run_either<Pass::forward>("conv2d_forward", out.dtype(), device, format, g, x.data_ptr(),
                            weight.data_ptr(), out.data_ptr());
  if (bias.defined()) {
    TensorDescriptor bias_desc, out_desc;
    const cudnnDataType_t type = cudnn_data_type(out.dtype(), "conv2d_forward");
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias_desc, cudnn_layout(format), type, 1,
                                                as_int(g.out_channels), 1, 1));
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(out_desc, cudnn_layout(format), type,
                                                as_int(g.batch), as_int(g.out_channels),
                                                as_int(g.out_h), as_int(g.out_w)));
    const double one_f64 = 1.0;
    const float one_f32 = 1.0f;
    const void* one = out.dtype() == DType::f64 ? static_cast<const void*>(&one_f64) : &one_f32;
    KILN_CUDNN_CHECK(cudnnAddTensor(cudnn_handle(device), one, bias_desc, bias.data_ptr(), one,
                                    out_desc, out.data_ptr()));
  }
}

void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                           const Conv2dGeometry& g) {
  const MemoryFormat format =
      require_operands("conv2d_backward_input", {&grad_out, &weight, &grad_x}, grad_x);
  require_non_empty("conv2d_backward_input", {&grad_out, &weight, &grad_x});
  const int device = grad_x.device().index;
  const cuda::DeviceGuard guard(device);
  run_either<Pass::backward_input>("conv2d_backward_input", grad_x.dtype(), device, format, g,
                                   grad_x.data_ptr(), weight.data_ptr(), grad_out.data_ptr());
}

void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                            const Conv2dGeometry& g) {
  const MemoryFormat format =
      require_operands("conv2d_backward_weight", {&grad_out, &x, &grad_weight}, grad_weight);
  require_non_empty("conv2d_backward_weight", {&grad_out, &x, &grad_weight});
  const int device = grad_weight.device().index;
  const cuda::DeviceGuard guard(device);
  run_either<Pass::backward_weight>("conv2d_backward_weight", grad_weight.dtype(), device, format,
                                    g, x.data_ptr(), grad_weight.data_ptr(), grad_out.data_ptr());
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr Conv2dKernels kCuda{.forward = cuda::conv2d_forward,
                              .backward_input = cuda::conv2d_backward_input,
                              .backward_weight = cuda::conv2d_backward_weight,
                              .takes_half = true,
                              .takes_channels_last = true,
                              .takes_bf16 = cuda::takes_bf16};
}  // namespace

const Conv2dKernels* const Conv2dKernels::cuda = &kCuda;

}  // namespace kiln
