// The fused cross entropy over [N, C, S] logits: the forward (log-sum-exp, label smoothing, class
// weights, ignore_index) and the backward from the saved log-sum-exp, in the accumulation type.
// The CPU has no fused kernel: its composed log_softmax and nll_loss (ops/loss.cpp) are the
// reference these kernels are tested against.
//
// A row is one (n, s) position: its C logits lie `inner` (S) apart. row_threads(C) threads share
// a row along x, each walking every row_threads-th class, and when that is a single warp
// kThreads / 32 rows share a block along y; the grid walks rows with a grid stride. A row's max
// and sums are combined with row_allreduce (block_reduce.cuh), which hands every thread of the row
// the same bits, so every thread subtracts the same log-sum-exp; nothing depends on timing.
#include <cstdint>
#include <string>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cross_entropy.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::cuda {

namespace {

template <class D, class Acc, class L>
__global__ void ce_forward_kernel(const D* x, const int64_t* t, const D* w, int64_t rows,
                                  int64_t classes, int64_t inner, int64_t ignore_index, Acc eps,
                                  Acc* lse_out, L* loss_out) {
  __shared__ RowReduceSmem<Acc> smem;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  // The loop bound is the same for the whole block, so every thread reaches row_allreduce.
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.y; first < rows; first += step) {
    const int64_t r = first + threadIdx.y;
    const bool valid = r < rows;
    const int64_t n = valid ? r / inner : 0, s = valid ? r - n * inner : 0;
    const D* row = x + n * classes * inner + s;

    // Max drops a NaN logit, as std::max on the CPU: it poisons se instead.
    const Acc lowest = Acc(-INFINITY);
    Acc m = lowest;
    if (valid)
      for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
        m = Max{}(m, device_convert<Acc>(row[c * inner]));
    m = row_allreduce(m, Max{}, lowest, smem);
    Acc se = 0;
    if (valid)
      for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
        se += exp_acc(device_convert<Acc>(row[c * inner]) - m);
    se = row_allreduce(se, Sum{}, Acc(0), smem);
    const Acc lse = m + log_acc(se);

    const int64_t target = valid ? t[r] : ignore_index;
    // Targets were checked by scan_nll_targets; the range test only keeps a bad call in bounds.
    const bool counted = valid && target != ignore_index && target >= 0 && target < classes;
    Acc smooth = 0;
    if (eps != Acc(0)) {  // the same for the whole block
      if (counted)
        for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
          smooth += (w ? device_convert<Acc>(w[c]) : Acc(1)) *
                    (device_convert<Acc>(row[c * inner]) - lse);
      smooth = row_allreduce(smooth, Sum{}, Acc(0), smem);
    }
    if (valid && threadIdx.x == 0) {
      lse_out[r] = lse;
      Acc loss = 0;
      if (counted) {
        const Acc wt = w ? device_convert<Acc>(w[target]) : Acc(1);
        loss = -wt * (device_convert<Acc>(row[target * inner]) - lse) * (Acc(1) - eps);
        // Left out when eps is 0, so that an infinite smoothing sum cannot turn 0 * inf into NaN.
        if (eps != Acc(0)) loss -= eps / static_cast<Acc>(classes) * smooth;
      }
      loss_out[r] = device_convert<L>(loss);
    }
  }
}

template <class D, class Acc>
__global__ void ce_backward_kernel(const Acc* g, bool per_row, const D* x, const int64_t* t,
                                   const D* w, const Acc* weight_sum, const Acc* lse, int64_t rows,
                                   int64_t classes, int64_t inner, int64_t ignore_index, Acc eps,
                                   const Acc* denominator, D* gx) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < rows;
       r += step) {
    const int64_t n = r / inner, s = r - n * inner;
    const int64_t base = n * classes * inner + s;
    const int64_t target = t[r];
    if (target == ignore_index || target < 0 || target >= classes) {
      for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) gx[base + c * inner] = D(0);
      continue;
    }
    const Acc gr = g[per_row ? r : 0] / (denominator ? *denominator : Acc(1));
    const Acc wt = w ? device_convert<Acc>(w[target]) : Acc(1);
    const Acc on_target = (Acc(1) - eps) * wt;
    const Acc smooth = eps / static_cast<Acc>(classes);
    // d loss / d x_c = p_c ((1 - eps) w_t + eps / C sum_k w_k) - ((1 - eps) w_t [c = t] + eps / C
    // w_c)
    Acc p_scale = on_target;
    if (eps != Acc(0)) p_scale += smooth * (w ? *weight_sum : static_cast<Acc>(classes));
    const Acc row_lse = lse[r];
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
      const Acc p = exp_acc(device_convert<Acc>(x[base + c * inner]) - row_lse);
      Acc q = c == target ? on_target : Acc(0);
      if (eps != Acc(0)) q += smooth * (w ? device_convert<Acc>(w[c]) : Acc(1));
      gx[base + c * inner] = device_convert<D>(gr * (p * p_scale - q));
    }
  }
}

struct Launch {
  dim3 grid, block;
};

Launch launch_for(int64_t rows, int64_t classes) {
  const int tx = row_threads(classes);
  const int ty = tx == kWarpSize ? kThreads / kWarpSize : 1;
  return {dim3(grid_for(rows, ty)), dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty))};
}

template <class F>
void visit_ce_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(float{}, float{});
    case DType::f64:
      return f(double{}, double{});
    case DType::f16:
      return f(__half{}, float{});
    case DType::bf16:
      return f(__nv_bfloat16{}, float{});
    default:
      throw DTypeError(std::string("cross_entropy: expected f32, f64, f16 or bf16 logits, got ") +
                       dtype_name(dtype));
  }
}

void check_layout(const Tensor& logits, const Tensor& target, const Tensor& lse) {
  if (logits.dim() != 3 || !logits.is_contiguous() || target.dtype() != DType::i64 ||
      !target.is_contiguous() || !lse.is_contiguous() ||
      lse.dtype() != (logits.dtype() == DType::f64 ? DType::f64 : DType::f32) ||
      lse.numel() != target.numel() || target.numel() != logits.shape()[0] * logits.shape()[2])
    throw ShapeError(
        std::string("cross_entropy: the GPU kernels need contiguous [N, C, S] logits, "
                    "i64 [N, S] targets and a [N * S] logsumexp of the accumulation "
                    "dtype"));
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                           int64_t ignore_index, double label_smoothing, const Tensor& lse,
                           const Tensor& losses) {
  check_layout(logits, target, lse);
  const int64_t rows = target.numel(), classes = logits.shape()[1], inner = logits.shape()[2];
  if (rows == 0) return;
  if (!losses.is_contiguous() || losses.numel() != rows ||
      (losses.dtype() != logits.dtype() && losses.dtype() != DType::f64))
    throw ShapeError(
        std::string("cross_entropy: the GPU forward needs contiguous losses of the "
                    "logits' dtype or f64, one per row"));
  const Launch l = launch_for(rows, classes);
  visit_ce_dtype(logits.dtype(), [&](auto d, auto acc) {
    using D = decltype(d);
    using Acc = decltype(acc);
    const D* x = static_cast<const D*>(logits.data_ptr());
    const D* w = weight.defined() ? static_cast<const D*>(weight.data_ptr()) : nullptr;
    const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
    Acc* lse_p = static_cast<Acc*>(lse.data_ptr());
    const Acc eps = static_cast<Acc>(label_smoothing);
    if (losses.dtype() == DType::f64) {
      KILN_LAUNCH(l.grid, l.block, 0, stream(), ce_forward_kernel<D, Acc, double>)
      (x, t, w, rows, classes, inner, ignore_index, eps, lse_p,
       static_cast<double*>(losses.data_ptr()));
    } else {
      KILN_LAUNCH(l.grid, l.block, 0, stream(), ce_forward_kernel<D, Acc, D>)
      (x, t, w, rows, classes, inner, ignore_index, eps, lse_p, static_cast<D*>(losses.data_ptr()));
    }
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_backward(const Tensor& grad, bool per_row, const Tensor& logits,
                            const Tensor& target, const Tensor& weight, const Tensor& weight_sum,
                            const Tensor& lse, int64_t ignore_index, double label_smoothing,
                            const Tensor& denominator, const Tensor& grad_logits) {
  check_layout(logits, target, lse);
  const int64_t rows = target.numel(), classes = logits.shape()[1], inner = logits.shape()[2];
  if (rows == 0) return;
  const bool need_weight_sum = weight.defined() && label_smoothing != 0.0;
  if (!grad.is_contiguous() || grad.dtype() != lse.dtype() ||
      grad.numel() != (per_row ? rows : 1) || !grad_logits.is_contiguous() ||
      grad_logits.dtype() != logits.dtype() || grad_logits.shape() != logits.shape() ||
      (need_weight_sum &&
       (!weight_sum.defined() || weight_sum.dtype() != lse.dtype() || weight_sum.numel() != 1)) ||
      (denominator.defined() && (denominator.dtype() != lse.dtype() || denominator.numel() != 1)))
    throw ShapeError(std::string("cross_entropy: bad arguments to the GPU backward"));
  const Launch l = launch_for(rows, classes);
  visit_ce_dtype(logits.dtype(), [&](auto d, auto acc) {
    using D = decltype(d);
    using Acc = decltype(acc);
    KILN_LAUNCH(l.grid, l.block, 0, stream(), ce_backward_kernel<D, Acc>)
    (static_cast<const Acc*>(grad.data_ptr()), per_row, static_cast<const D*>(logits.data_ptr()),
     static_cast<const int64_t*>(target.data_ptr()),
     weight.defined() ? static_cast<const D*>(weight.data_ptr()) : nullptr,
     need_weight_sum ? static_cast<const Acc*>(weight_sum.data_ptr()) : nullptr,
     static_cast<const Acc*>(lse.data_ptr()), rows, classes, inner, ignore_index,
     static_cast<Acc>(label_smoothing),
     denominator.defined() ? static_cast<const Acc*>(denominator.data_ptr()) : nullptr,
     static_cast<D*>(grad_logits.data_ptr()));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr CrossEntropyKernels kCuda{.forward = cuda::cross_entropy_forward,
                                    .backward = cuda::cross_entropy_backward};
}  // namespace

const CrossEntropyKernels* const CrossEntropyKernels::cuda = &kCuda;

}  // namespace kiln
