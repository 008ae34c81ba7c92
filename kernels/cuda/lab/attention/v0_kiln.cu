// Attention v0: kiln's own path on the GPU. kiln's scaled_dot_product_attention (ops/attention.cpp)
// has no fused kernel on CUDA: it composes matmul (cuBLAS), a scale, a masked_fill for the causal
// mask, softmax (kiln's kernel) and a second matmul, the L x S scores and probabilities tensors in
// memory, as PyTorch's "math" backend. A kernel may not call an op (scripts/check-layers.py), so
// this version calls the kernels the op reaches, through the same tables: MatmulKernels (cuBLAS)
// for both products and SoftmaxKernels for the softmax, with one lab kernel for the scale and the
// mask (two elementwise launches in the op) and one for the log-sum-exp, which the op does not
// return (a warp per row, the online max and sum of softmax v3):
//
//   scores = Q K^T                          MatmulKernels::cuda->batched_matmul (K^T a view)
//   scores = attends ? scale scores : -inf  scale_mask_kernel
//   P = softmax(scores);  lse               SoftmaxKernels::cuda->softmax; lse_kernel
//   O = P V                                 MatmulKernels::cuda->batched_matmul
//
// Backward: what kiln's autograd runs for the composed op, through the same tables: P again as
// above (autograd would have kept it), dV = P^T dO, dP = dO V^T, dS = softmax_backward(P, dP)
// (kiln's kernel: P (dP - rowsum(dP P))), dS *= scale (scale_mask_kernel), dQ = dS K, dK = dS^T Q.
//
// Of the tensor-core table (bf16, f16 inputs) it is the reference too: the inputs are converted to
// f32 first (CopyKernels, what Tensor::to calls), so v4 is checked against the f32 attention of
// the same numbers. On the simulator only the two lab kernels are counted (docs/kernels/
// attention.md): cuBLAS is kiln's CPU matmul there, and kiln's softmax is not compiled for
// counting.
//
// measured: not yet on a GPU.
#include <cmath>
#include <cstdint>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"
#include "kiln/kernels/copy.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/lab/attention/mask_dropout.h"
#include "kiln/kernels/cuda/lab/attention/problem.h"
#include "kiln/kernels/cuda/lab/attention/tiling.h"
#include "kiln/kernels/cuda/lab/attention/versions.h"
#include "kiln/kernels/cuda/lab/borrowed_tensor.h"
#include "kiln/kernels/cuda/lab/softmax/online.h"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/matmul.h"
#include "kiln/kernels/softmax.h"

namespace kiln::lab::attention {

namespace {

// x[h][l][s] *= scale, or -inf where query l does not attend key s (mask: false for the backward,
// where the masked dS are already 0).
__global__ void __launch_bounds__(kNaiveThreads)
    scale_mask_kernel(float* __restrict__ x, int64_t total, int64_t l_len, int64_t s_len,
                      float scale, bool causal) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = i % s_len, l = i / s_len % l_len;
    x[i] = attends(causal, l, s) ? x[i] * scale : -INFINITY;
  }
}

__global__ void __launch_bounds__(kRowThreads)
    lse_kernel(const float* __restrict__ scores, float* __restrict__ lse, int64_t rows,
               int64_t s_len) {
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t row = int64_t{blockIdx.x} * kRowWarps + threadIdx.x / kWarpSize; row < rows;
       row += int64_t{gridDim.x} * kRowWarps) {
    softmax::MaxSum state = softmax::empty_max_sum();
    for (int64_t s = lane; s < s_len; s += kWarpSize)
      softmax::online_update(state, scores[row * s_len + s]);
    state = cuda::warp_allreduce(state, softmax::CombineMaxSum{});
    if (lane == 0) lse[row] = state.max + logf(state.sum);
  }
}

void scale_mask(const Tensor& x, int64_t l_len, int64_t s_len, float scale, bool causal) {
  const int64_t total = x.numel();
  KILN_LAUNCH(static_cast<unsigned>(blocks_for(total, kNaiveThreads)), kNaiveThreads, 0,
              cuda::stream(), scale_mask_kernel)
  (x.data<float>(), total, l_len, s_len, scale, causal);
  KILN_CUDA_CHECK_LAUNCH();
}

void batched_matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  const MatmulKernels& matmul = *MatmulKernels::cuda;
  matmul.batched_matmul(matmul.as_gemm_operand(a), matmul.as_gemm_operand(b), out, false);
}

// P = softmax(scale Q K^T, masked) [bh, L, S], and the scores' lse when `lse` is given.
Tensor probabilities(const Tensor& q, const Tensor& k, float scale, bool causal, float* lse) {
  const int64_t bh = q.size(0), l_len = q.size(1), s_len = k.size(1);
  const Device device = q.device();
  const Tensor scores = empty({bh, l_len, s_len}, DType::f32, device);
  batched_matmul(q, k.transpose(1, 2), scores);
  scale_mask(scores, l_len, s_len, scale, causal);
  if (lse) {
    KILN_LAUNCH(static_cast<unsigned>(blocks_for(bh * l_len, kRowWarps)), kRowThreads, 0,
                cuda::stream(), lse_kernel)
    (scores.data<float>(), lse, bh * l_len, s_len);
    KILN_CUDA_CHECK_LAUNCH();
  }
  const Tensor p = empty({bh, l_len, s_len}, DType::f32, device);
  SoftmaxKernels::cuda->softmax(scores, 2, /*log=*/false, p);
  return p;
}

// An input as an f32 tensor: itself, or an f32 copy of a 16-bit one.
Tensor as_f32(const void* data, const Shape& shape, DType dtype, Device device) {
  const Tensor t = borrow_tensor(data, shape, dtype, device);
  if (dtype == DType::f32) return t;
  const Tensor copy = empty(shape, DType::f32, device);
  CopyKernels::cuda->copy(t, copy);
  return copy;
}

}  // namespace

void v0_kiln(const AttentionArgs& a) {
  check_shape("v0_kiln", a.batch_heads, a.l, a.s, a.d);
  check_plain("v0_kiln", a.mask, a.dropout);
  if (a.batch_heads == 0 || a.l == 0) return;
  const Device device = Device::cuda(cuda::current_device());
  const Tensor q = as_f32(a.q, {a.batch_heads, a.l, a.d}, a.dtype, device);
  const Tensor k = as_f32(a.k, {a.batch_heads, a.s, a.d}, a.dtype, device);
  const Tensor v = as_f32(a.v, {a.batch_heads, a.s, a.d}, a.dtype, device);
  const Tensor o = borrow_tensor(a.o, {a.batch_heads, a.l, a.d}, DType::f32, device);
  batched_matmul(probabilities(q, k, a.scale, a.causal, a.lse), v, o);
}

void v0_kiln_backward(const AttentionBackwardArgs& a) {
  check_shape("v0_kiln", a.batch_heads, a.l, a.s, a.d);
  check_plain("v0_kiln", a.mask, a.dropout);
  if (a.batch_heads == 0) return;
  const Device device = Device::cuda(cuda::current_device());
  const Tensor q = borrow_tensor(a.q, {a.batch_heads, a.l, a.d}, DType::f32, device);
  const Tensor k = borrow_tensor(a.k, {a.batch_heads, a.s, a.d}, DType::f32, device);
  const Tensor v = borrow_tensor(a.v, {a.batch_heads, a.s, a.d}, DType::f32, device);
  const Tensor dout = borrow_tensor(a.dout, {a.batch_heads, a.l, a.d}, DType::f32, device);
  const Tensor dq = borrow_tensor(a.dq, {a.batch_heads, a.l, a.d}, DType::f32, device);
  const Tensor dk = borrow_tensor(a.dk, {a.batch_heads, a.s, a.d}, DType::f32, device);
  const Tensor dv = borrow_tensor(a.dv, {a.batch_heads, a.s, a.d}, DType::f32, device);
  if (a.l == 0) {  // no query: nothing reaches the keys
    CopyKernels::cuda->fill(dk, 0.0);
    CopyKernels::cuda->fill(dv, 0.0);
    return;
  }
  const Tensor p = probabilities(q, k, a.scale, a.causal, nullptr);
  batched_matmul(p.transpose(1, 2), dout, dv);
  const Tensor dp = empty({a.batch_heads, a.l, a.s}, DType::f32, device);
  batched_matmul(dout, v.transpose(1, 2), dp);
  const Tensor ds = empty({a.batch_heads, a.l, a.s}, DType::f32, device);
  SoftmaxKernels::cuda->softmax_backward(p, dp, 2, /*log=*/false, ds);
  scale_mask(ds, a.l, a.s, a.scale, /*causal=*/false);
  batched_matmul(ds, k, dq);
  batched_matmul(ds.transpose(1, 2), q, dk);
}

}  // namespace kiln::lab::attention
