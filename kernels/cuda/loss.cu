// nll_loss over [N, C, S] log-probabilities with i64 targets [N, S]: the scan that checks the
// targets and totals their weights, the forward and the backward. One thread per target (grid-
// stride, kThreads a block).
//
// The two sums (the scan's total weight, the forward's total loss) are taken in double in two
// stages: row_allreduce (block_reduce.cuh) combines each block's threads, each block leaves its
// total in a small array, and those are added in block order (by one GPU thread for the scan, whose
// total stays on the device for a CUDA graph's sake; by the host for the forward). The grid for
// them is capped at kSumBlocks whatever the device, so a result depends only on the problem size
// and repeats bit for bit; the cap is also what keeps the array the host reads back small.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/cuda_check.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/loss.h"

namespace kiln::cuda {

namespace {

// The grid of the summing kernels, which fixes how the sums are split: see the top of the file.
constexpr int64_t kSumBlocks = 256;

struct ScanAcc {
  int64_t bad;  // the smallest bad position, INT64_MAX when none
  double weight;
};

struct ScanCombine {
  __device__ ScanAcc operator()(ScanAcc a, ScanAcc b) const {
    return {a.bad < b.bad ? a.bad : b.bad, a.weight + b.weight};
  }
};

// W is the weight's device type; w is null for weight 1 everywhere.
template <class W>
__global__ void scan_targets_kernel(const int64_t* t, int64_t count, const W* w, int64_t classes,
                                    int64_t ignore_index, ScanAcc* partial) {
  __shared__ RowReduceSmem<ScanAcc> smem;
  const ScanAcc none{INT64_MAX, 0.0};
  ScanAcc acc = none;
  for (int64_t i = global_thread_index(); i < count; i += grid_stride()) {
    const int64_t target = t[i];
    if (target == ignore_index) continue;
    if (target < 0 || target >= classes) {
      if (i < acc.bad) acc.bad = i;
      continue;
    }
    acc.weight += w ? device_convert<double>(w[target]) : 1.0;
  }
  acc = row_allreduce(acc, ScanCombine{}, none, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// The scan's partials in block order, as one value on the device: the total weight, NaN when a
// target is out of range.
__global__ void scan_total_kernel(const ScanAcc* partial, unsigned blocks, ScanAcc* total,
                                  double* total_weight) {
  ScanAcc acc{INT64_MAX, 0.0};
  for (unsigned b = 0; b < blocks; ++b) {
    acc.bad = partial[b].bad < acc.bad ? partial[b].bad : acc.bad;
    acc.weight += partial[b].weight;
  }
  *total = acc;
  *total_weight = acc.bad == INT64_MAX ? acc.weight : nan("");
}

template <class D>
__global__ void nll_forward_kernel(const D* lp, const int64_t* t, const D* w, int64_t count,
                                   int64_t classes, int64_t inner, int64_t ignore_index, D* losses,
                                   double* partial) {
  __shared__ RowReduceSmem<double> smem;
  double acc = 0.0;
  for (int64_t i = global_thread_index(); i < count; i += grid_stride()) {
    const int64_t target = t[i];
    double loss = 0.0;
    // Targets were checked by scan_nll_targets; the range test only keeps a bad call in bounds.
    if (target != ignore_index && target >= 0 && target < classes) {
      const int64_t n = i / inner, s = i - n * inner;
      const double wt = w ? device_convert<double>(w[target]) : 1.0;
      loss = -wt * device_convert<double>(lp[(n * classes + target) * inner + s]);
    }
    if (losses) losses[i] = device_convert<D>(loss);
    acc += loss;
  }
  acc = row_allreduce(acc, Sum{}, 0.0, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <class D, class Acc>
__global__ void nll_backward_kernel(const D* g, const int64_t* t, const D* w, int64_t count,
                                    int64_t classes, int64_t inner, int64_t ignore_index,
                                    D* grad_input) {
  for (int64_t i = global_thread_index(); i < count; i += grid_stride()) {
    const int64_t target = t[i];
    if (target == ignore_index || target < 0 || target >= classes) continue;
    const int64_t n = i / inner, s = i - n * inner;
    const Acc wt = w ? device_convert<Acc>(w[target]) : Acc(1);
    grad_input[(n * classes + target) * inner + s] =
        device_convert<D>(-wt * device_convert<Acc>(g[i]));
  }
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
  scan.total_weight_tensor = empty({}, DType::f64, target.device());
  if (count == 0) {
    memset_zero(scan.total_weight_tensor.data_ptr(), target.device(), sizeof(double));
    return scan;
  }
  const unsigned grid = grid_for(count, kThreads, kSumBlocks);
  Tensor partial =
      empty({static_cast<int64_t>((grid + 1) * sizeof(ScanAcc))}, DType::u8, target.device());
  ScanAcc* p = static_cast<ScanAcc*>(partial.data_ptr());
  const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
  if (!weight.defined()) {
    KILN_LAUNCH(grid, kThreads, 0, stream(), scan_targets_kernel<float>)
    (t, count, nullptr, num_classes, ignore_index, p);
    KILN_CUDA_CHECK_LAUNCH();
  } else {
    visit_loss_dtype(weight.dtype(), [&](auto tag) {
      using D = device_t<typename decltype(tag)::type>;
      KILN_LAUNCH(grid, kThreads, 0, stream(), scan_targets_kernel<D>)
      (t, count, static_cast<const D*>(weight.data_ptr()), num_classes, ignore_index, p);
      KILN_CUDA_CHECK_LAUNCH();
    });
  }
  KILN_LAUNCH(1, 1, 0, stream(), scan_total_kernel)
  (p, grid, p + grid, scan.total_weight_tensor.data<double>());
  KILN_CUDA_CHECK_LAUNCH();
  if (is_current_stream_capturing(target.device().index)) {
    scan.total_weight = nan("");
    return scan;
  }
  // On partial's device's current stream, which the kernels went on (the device switch made that
  // device current, ops/dispatch.h), and waited for: the read follows them.
  ScanAcc h{};
  copy_bytes(&h, Device::cpu(), p + grid, partial.device(), sizeof(ScanAcc));
  // As the CPU: a bad target ends the scan, and the total is not used.
  if (h.bad != INT64_MAX) {
    scan.bad_position = h.bad;
    return scan;
  }
  scan.total_weight = h.weight;
  return scan;
}

double nll_loss_forward(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                        int64_t ignore_index, const Tensor& losses) {
  check_target(target);
  const int64_t classes = log_probs.shape()[1], inner = log_probs.shape()[2];
  const int64_t count = target.numel();
  if (count == 0) return 0.0;
  const unsigned grid = grid_for(count, kThreads, kSumBlocks);
  Tensor partial = empty({static_cast<int64_t>(grid)}, DType::f64, log_probs.device());
  visit_loss_dtype(log_probs.dtype(), [&](auto tag) {
    using D = device_t<typename decltype(tag)::type>;
    KILN_LAUNCH(grid, kThreads, 0, stream(), nll_forward_kernel<D>)
    (static_cast<const D*>(log_probs.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
     weight.defined() ? static_cast<const D*>(weight.data_ptr()) : nullptr, count, classes, inner,
     ignore_index, losses.defined() ? static_cast<D*>(losses.data_ptr()) : nullptr,
     static_cast<double*>(partial.data_ptr()));
    KILN_CUDA_CHECK_LAUNCH();
  });
  std::vector<double> h(grid);  // read after the kernel, as in scan_nll_targets
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
    using D = device_t<T>;
    using Acc = acc_type_t<T>;
    KILN_LAUNCH(grid_for(count), kThreads, 0, stream(), nll_backward_kernel<D, Acc>)
    (static_cast<const D*>(grad.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
     weight.defined() ? static_cast<const D*>(weight.data_ptr()) : nullptr, count, classes, inner,
     ignore_index, static_cast<D*>(grad_input.data_ptr()));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr LossKernels kCuda{.scan_nll_targets = cuda::scan_nll_targets,
                            .nll_loss_forward = cuda::nll_loss_forward,
                            .nll_loss_backward = cuda::nll_loss_backward};
}  // namespace

const LossKernels* const LossKernels::cuda = &kCuda;

}  // namespace kiln
