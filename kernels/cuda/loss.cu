#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/kernels/loss.h"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/cuda/reduce_util.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;
// A fixed grid for the summing kernels: the per-block partials are added on the host in block
// order, so a result does not depend on the device.
constexpr int64_t kMaxBlocks = 256;

struct ScanAcc {
  int64_t bad;  // the smallest bad position, INT64_MAX when none
  double weight;
};

struct ScanOp {
  using acc_t = ScanAcc;
  __device__ ScanAcc identity() const { return {INT64_MAX, 0.0}; }
  __device__ ScanAcc combine(ScanAcc a, ScanAcc b) const {
    return {a.bad < b.bad ? a.bad : b.bad, a.weight + b.weight};
  }
  __device__ ScanAcc shfl_down(ScanAcc a, int offset) const {
    return {red::shfl_down(a.bad, offset), red::shfl_down(a.weight, offset)};
  }
};

struct DoubleAdd {
  using acc_t = double;
  __device__ double identity() const { return 0.0; }
  __device__ double combine(double a, double b) const { return a + b; }
  __device__ double shfl_down(double a, int offset) const { return red::shfl_down(a, offset); }
};

// W is the weight's device type; w is null for weight 1 everywhere.
template <class W>
__global__ void scan_targets_kernel(const int64_t* t, int64_t count, const W* w, int64_t classes,
                                    int64_t ignore_index, ScanAcc* partial) {
  __shared__ ScanAcc smem[32];
  ScanAcc acc{INT64_MAX, 0.0};
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t target = t[i];
    if (target == ignore_index) continue;
    if (target < 0 || target >= classes) {
      if (i < acc.bad) acc.bad = i;
      continue;
    }
    acc.weight += w ? red::cvt<double>(w[target]) : 1.0;
  }
  acc = red::row_combine(acc, ScanOp{}, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <class D>
__global__ void nll_forward_kernel(const D* lp, const int64_t* t, const D* w, int64_t count,
                                   int64_t classes, int64_t inner, int64_t ignore_index, D* losses,
                                   double* partial) {
  __shared__ double smem[32];
  double acc = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t target = t[i];
    double loss = 0.0;
    // Targets were checked by scan_nll_targets; the range test only keeps a bad call in bounds.
    if (target != ignore_index && target >= 0 && target < classes) {
      const int64_t n = i / inner, s = i - n * inner;
      const double wt = w ? red::cvt<double>(w[target]) : 1.0;
      loss = -wt * red::cvt<double>(lp[(n * classes + target) * inner + s]);
    }
    if (losses) losses[i] = red::cvt<D>(loss);
    acc += loss;
  }
  acc = red::row_combine(acc, DoubleAdd{}, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <class D, class Acc>
__global__ void nll_backward_kernel(const D* g, const int64_t* t, const D* w, int64_t count,
                                    int64_t classes, int64_t inner, int64_t ignore_index,
                                    D* grad_input) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t target = t[i];
    if (target == ignore_index || target < 0 || target >= classes) continue;
    const int64_t n = i / inner, s = i - n * inner;
    const Acc wt = w ? red::cvt<Acc>(w[target]) : Acc(1);
    grad_input[(n * classes + target) * inner + s] = red::cvt<D>(-wt * red::cvt<Acc>(g[i]));
  }
}

template <class F>
void visit_loss_dtype(DType dtype, F&& f) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<acc_type_t<T>>) {
      f(tag);
    } else {
      throw DTypeError(std::string("nll_loss: expected floating-point log-probabilities, got ") +
                       dtype_name(dtype));
    }
  });
}

unsigned grid_for(int64_t count) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min(red::ceil_div(count, kThreads), kMaxBlocks)));
}

void check_target(const Tensor& target) {
  if (target.dtype() != DType::i64 || !target.is_contiguous())
    throw DTypeError(std::string("nll_loss: the GPU kernels need contiguous i64 targets, got ") +
                     dtype_name(target.dtype()));
}

}  // namespace

NllTargetScan scan_nll_targets(const Tensor& target, const Tensor& weight, int64_t num_classes,
                                    int64_t ignore_index) {
  check_target(target);
  NllTargetScan scan;
  const int64_t count = target.numel();
  if (count == 0) return scan;
  const unsigned grid = grid_for(count);
  Tensor partial =
      empty({static_cast<int64_t>(grid * sizeof(ScanAcc))}, DType::u8, target.device());
  ScanAcc* p = static_cast<ScanAcc*>(partial.data_ptr());
  const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
  if (!weight.defined()) {
    scan_targets_kernel<float>
        <<<grid, kThreads, 0, stream()>>>(t, count, nullptr, num_classes, ignore_index, p);
    KILN_CUDA_CHECK_LAUNCH();
  } else {
    visit_loss_dtype(weight.dtype(), [&](auto tag) {
      using D = red::device_t<typename decltype(tag)::type>;
      scan_targets_kernel<D><<<grid, kThreads, 0, stream()>>>(
          t, count, static_cast<const D*>(weight.data_ptr()), num_classes, ignore_index, p);
      KILN_CUDA_CHECK_LAUNCH();
    });
  }
  std::vector<ScanAcc> h(grid);
  copy_bytes(h.data(), Device::cpu(), partial.data_ptr(), partial.device(), grid * sizeof(ScanAcc));
  int64_t bad = INT64_MAX;
  double total = 0.0;
  for (unsigned b = 0; b < grid; ++b) {
    bad = std::min(bad, h[b].bad);
    total += h[b].weight;
  }
  // As the CPU: a bad target ends the scan, and the total is not used.
  if (bad != INT64_MAX) {
    scan.bad_position = bad;
    return scan;
  }
  scan.total_weight = total;
  return scan;
}

double nll_loss_forward(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                        int64_t ignore_index, const Tensor& losses) {
  check_target(target);
  const int64_t classes = log_probs.shape()[1], inner = log_probs.shape()[2];
  const int64_t count = target.numel();
  if (count == 0) return 0.0;
  const unsigned grid = grid_for(count);
  Tensor partial = empty({static_cast<int64_t>(grid)}, DType::f64, log_probs.device());
  visit_loss_dtype(log_probs.dtype(), [&](auto tag) {
    using D = red::device_t<typename decltype(tag)::type>;
    nll_forward_kernel<D><<<grid, kThreads, 0, stream()>>>(
        static_cast<const D*>(log_probs.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
        weight.defined() ? static_cast<const D*>(weight.data_ptr()) : nullptr, count, classes,
        inner, ignore_index, losses.defined() ? static_cast<D*>(losses.data_ptr()) : nullptr,
        static_cast<double*>(partial.data_ptr()));
    KILN_CUDA_CHECK_LAUNCH();
  });
  std::vector<double> h(grid);
  copy_bytes(h.data(), Device::cpu(), partial.data_ptr(), partial.device(), grid * sizeof(double));
  double total = 0.0;
  for (unsigned b = 0; b < grid; ++b) total += h[b];
  return total;
}

void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& weight,
                       int64_t ignore_index, const Tensor& grad_input) {
  check_target(target);
  const int64_t classes = grad_input.shape()[1], inner = grad_input.shape()[2];
  const int64_t count = target.numel();
  if (count == 0) return;
  visit_loss_dtype(grad_input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using D = red::device_t<T>;
    using Acc = acc_type_t<T>;
    const unsigned grid =
        static_cast<unsigned>(std::min(red::ceil_div(count, kThreads), int64_t(1) << 20));
    nll_backward_kernel<D, Acc><<<grid, kThreads, 0, stream()>>>(
        static_cast<const D*>(grad.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
        weight.defined() ? static_cast<const D*>(weight.data_ptr()) : nullptr, count, classes,
        inner, ignore_index, static_cast<D*>(grad_input.data_ptr()));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr LossKernels kCuda{
    .scan_nll_targets = cuda::scan_nll_targets,
    .nll_loss_forward = cuda::nll_loss_forward,
    .nll_loss_backward = cuda::nll_loss_backward};
}  // namespace

const LossKernels* const LossKernels::cuda = &kCuda;

}  // namespace kiln
