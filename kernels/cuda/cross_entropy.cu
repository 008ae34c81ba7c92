#include <algorithm>
#include <cstdint>
#include <string>

#include "kiln/kernels/cross_entropy.h"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/cuda/reduce_util.cuh"

namespace kiln::cuda {

namespace {

// Threads per block: row_threads(C) along x for one row; when that is a single warp, several rows
// share a block along y.
constexpr int kRowsThreads = 256;
constexpr int64_t kMaxGrid = int64_t(1) << 20;

struct Max {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a < b ? b : a;  // as std::max on the CPU: a NaN b is dropped, a NaN a is kept
  }
};

struct Add {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};

// Combines v over the threads of this row (threadIdx.x) and gives the result to all of them. The
// xor butterfly hands every lane a bitwise identical value (each step combines the same pair in
// either order, and the combines are commutative), and the warps are then combined in a fixed
// order: the result does not depend on timing. Every thread of the block must call it; with more
// than one warp per row blockDim.y is 1, so smem needs one slot per warp.
template <class A, class Op>
__device__ A row_allreduce(A v, Op op, A* smem) {
  for (int mask = 16; mask > 0; mask >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, mask));
  if (blockDim.x <= 32) return v;
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = smem[0];
  for (int k = 1; k < warps; ++k) v = op(v, smem[k]);
  __syncthreads();
  return v;
}

template <class D, class Acc, class L>
__global__ void ce_forward_kernel(const D* x, const int64_t* t, const D* w, int64_t rows,
                                  int64_t classes, int64_t inner, int64_t ignore_index, Acc eps,
                                  Acc* lse_out, L* loss_out) {
  __shared__ Acc smem[32];
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  // The loop bound is the same for the whole block, so every thread reaches row_allreduce.
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.y; first < rows; first += step) {
    const int64_t r = first + threadIdx.y;
    const bool valid = r < rows;
    const int64_t n = valid ? r / inner : 0, s = valid ? r - n * inner : 0;
    const D* row = x + n * classes * inner + s;

    Acc m = Acc(-INFINITY);
    if (valid)
      for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
        m = Max{}(m, red::cvt<Acc>(row[c * inner]));
    m = row_allreduce(m, Max{}, smem);
    Acc se = 0;
    if (valid)
      for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
        se += red::exp_acc(red::cvt<Acc>(row[c * inner]) - m);
    se = row_allreduce(se, Add{}, smem);
    const Acc lse = m + red::log_acc(se);

    const int64_t target = valid ? t[r] : ignore_index;
    // Targets were checked by scan_nll_targets; the range test only keeps a bad call in bounds.
    const bool counted = valid && target != ignore_index && target >= 0 && target < classes;
    Acc smooth = 0;
    if (eps != Acc(0)) {  // the same for the whole block
      if (counted)
        for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
          smooth += (w ? red::cvt<Acc>(w[c]) : Acc(1)) * (red::cvt<Acc>(row[c * inner]) - lse);
      smooth = row_allreduce(smooth, Add{}, smem);
    }
    if (valid && threadIdx.x == 0) {
      lse_out[r] = lse;
      Acc loss = 0;
      if (counted) {
        const Acc wt = w ? red::cvt<Acc>(w[target]) : Acc(1);
        loss = -wt * (red::cvt<Acc>(row[target * inner]) - lse) * (Acc(1) - eps);
        // Left out when eps is 0, so that an infinite smoothing sum cannot turn 0 * inf into NaN.
        if (eps != Acc(0)) loss -= eps / static_cast<Acc>(classes) * smooth;
      }
      loss_out[r] = red::cvt<L>(loss);
    }
  }
}

template <class D, class Acc>
__global__ void ce_backward_kernel(const Acc* g, bool per_row, const D* x, const int64_t* t,
                                   const D* w, const Acc* weight_sum, const Acc* lse, int64_t rows,
                                   int64_t classes, int64_t inner, int64_t ignore_index, Acc eps,
                                   Acc denominator, D* gx) {
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
    const Acc gr = g[per_row ? r : 0] / denominator;
    const Acc wt = w ? red::cvt<Acc>(w[target]) : Acc(1);
    const Acc on_target = (Acc(1) - eps) * wt;
    const Acc smooth = eps / static_cast<Acc>(classes);
    // d loss / d x_c = p_c ((1 - eps) w_t + eps / C sum_k w_k) - ((1 - eps) w_t [c = t] + eps / C
    // w_c)
    Acc p_scale = on_target;
    if (eps != Acc(0)) p_scale += smooth * (w ? *weight_sum : static_cast<Acc>(classes));
    const Acc row_lse = lse[r];
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
      const Acc p = red::exp_acc(red::cvt<Acc>(x[base + c * inner]) - row_lse);
      Acc q = c == target ? on_target : Acc(0);
      if (eps != Acc(0)) q += smooth * (w ? red::cvt<Acc>(w[c]) : Acc(1));
      gx[base + c * inner] = red::cvt<D>(gr * (p * p_scale - q));
    }
  }
}

struct Launch {
  dim3 grid, block;
};

Launch launch_for(int64_t rows, int64_t classes) {
  const int tx = red::row_threads(classes);
  const int ty = tx == 32 ? kRowsThreads / 32 : 1;
  const int64_t blocks = std::max<int64_t>(1, std::min(red::ceil_div(rows, ty), kMaxGrid));
  return {dim3(static_cast<unsigned>(blocks)),
          dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty))};
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
      ce_forward_kernel<D, Acc, double>
          <<<l.grid, l.block, 0, stream()>>>(x, t, w, rows, classes, inner, ignore_index, eps,
                                             lse_p, static_cast<double*>(losses.data_ptr()));
    } else {
      ce_forward_kernel<D, Acc, D>
          <<<l.grid, l.block, 0, stream()>>>(x, t, w, rows, classes, inner, ignore_index, eps,
                                             lse_p, static_cast<D*>(losses.data_ptr()));
    }
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_backward(const Tensor& grad, bool per_row, const Tensor& logits,
                            const Tensor& target, const Tensor& weight, const Tensor& weight_sum,
                            const Tensor& lse, int64_t ignore_index, double label_smoothing,
                            double denominator, const Tensor& grad_logits) {
  check_layout(logits, target, lse);
  const int64_t rows = target.numel(), classes = logits.shape()[1], inner = logits.shape()[2];
  if (rows == 0) return;
  const bool need_weight_sum = weight.defined() && label_smoothing != 0.0;
  if (!grad.is_contiguous() || grad.dtype() != lse.dtype() ||
      grad.numel() != (per_row ? rows : 1) || !grad_logits.is_contiguous() ||
      grad_logits.dtype() != logits.dtype() || grad_logits.shape() != logits.shape() ||
      (need_weight_sum &&
       (!weight_sum.defined() || weight_sum.dtype() != lse.dtype() || weight_sum.numel() != 1)))
    throw ShapeError(std::string("cross_entropy: bad arguments to the GPU backward"));
  const Launch l = launch_for(rows, classes);
  visit_ce_dtype(logits.dtype(), [&](auto d, auto acc) {
    using D = decltype(d);
    using Acc = decltype(acc);
    ce_backward_kernel<D, Acc><<<l.grid, l.block, 0, stream()>>>(
        static_cast<const Acc*>(grad.data_ptr()), per_row, static_cast<const D*>(logits.data_ptr()),
        static_cast<const int64_t*>(target.data_ptr()),
        weight.defined() ? static_cast<const D*>(weight.data_ptr()) : nullptr,
        need_weight_sum ? static_cast<const Acc*>(weight_sum.data_ptr()) : nullptr,
        static_cast<const Acc*>(lse.data_ptr()), rows, classes, inner, ignore_index,
        static_cast<Acc>(label_smoothing), static_cast<Acc>(denominator),
        static_cast<D*>(grad_logits.data_ptr()));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr CrossEntropyKernels kCuda{
    .forward = cuda::cross_entropy_forward,
    .backward = cuda::cross_entropy_backward};
}  // namespace

const CrossEntropyKernels* const CrossEntropyKernels::cuda = &kCuda;

}  // namespace kiln
