// Attention backward v1: the gradients recomputed from the saved log-sum-exp, never storing the
// L x S matrix (FlashAttention's backward, here with v2's warp per row rather than tiles). The
// forward saved lse[l] = log sum_s exp(x_ls), so each probability comes back from one score:
// P_ls = exp(scale q_l . k_s - lse_l), with no max and no sum to redo. Three kernels:
//
//   delta:  delta_l = dO_l . O_l  (= sum_s P_ls dP_ls)                   a warp per query row
//   dK, dV: for each query l that attends key s (with the mask, l >= s):  a warp per key row
//             p = exp(scale q_l . k_s - lse_l);  dV_s += p dO_l
//             ds = p (dO_l . v_s - delta_l);     dK_s += scale ds q_l
//   dQ:     for each key s query l attends:                               a warp per query row
//             the same p and ds;                 dQ_l += scale ds k_s
//
// dK and dV of a key come from one warp, and dQ of a query from one other, so no two warps add
// into one row: no atomics and no zeroing, and the sums come out the same on every run (the
// FlashAttention-2 backward accumulates dQ with atomics instead, to compute each score once).
//
// What it costs: every score and its exp twice (once for dK and dV, once for dQ) and Q, dO read
// once per key and K, V once per query, as v2 does: a warp walks a whole row. Tiling it as v3 and
// v4 do the forward is the next step; docs/kernels/attention.md has the traffic.
//
// The mask tensor and dropout (what kiln's op routes here, mask_dropout.h): the score takes M_ls
// as the forward's did, and the keep factor f of (l, s) (the forward's, drawn again from the same
// seed and offset) enters twice: dV_s += p f dO_l, and ds = p (f dO_l . v_s - delta_l); delta is
// dO . O of the dropped O, which is sum_s p dP for dP the gradient of the undropped P.
//
// measured: not yet on a GPU.
#include <cmath>
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/lab/attention/mask_dropout.h"
#include "kiln/kernels/cuda/lab/attention/problem.h"
#include "kiln/kernels/cuda/lab/attention/tiling.h"
#include "kiln/kernels/cuda/lab/attention/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::attention {

namespace {

// Lane j's elements j, j + 32, ... of row `r` (D floats); 0 past D.
__device__ __forceinline__ void load_row(const float* __restrict__ r, int d, int lane,
                                         float (&out)[kMaxPerLane]) {
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int c = lane + i * kWarpSize;
    out[i] = c < d ? r[c] : 0.0f;
  }
}

__device__ __forceinline__ float warp_dot(const float (&a)[kMaxPerLane],
                                          const float (&b)[kMaxPerLane]) {
  float dot = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) dot += a[i] * b[i];
  return cuda::warp_allreduce(dot, cuda::Sum{});
}

__device__ __forceinline__ void store_row(float* __restrict__ r, int d, int lane,
                                          const float (&in)[kMaxPerLane]) {
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int c = lane + i * kWarpSize;
    if (c < d) r[c] = in[i];
  }
}

__global__ void __launch_bounds__(kRowThreads)
    delta_kernel(const float* __restrict__ o, const float* __restrict__ dout,
                 float* __restrict__ delta, int64_t rows, int d) {
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t row = int64_t{blockIdx.x} * kRowWarps + threadIdx.x / kWarpSize; row < rows;
       row += int64_t{gridDim.x} * kRowWarps) {
    float a[kMaxPerLane], b[kMaxPerLane];
    load_row(o + row * d, d, lane, a);
    load_row(dout + row * d, d, lane, b);
    const float dot = warp_dot(a, b);
    if (lane == 0) delta[row] = dot;
  }
}

__global__ void __launch_bounds__(kRowThreads)
    dkdv_kernel(const float* __restrict__ q, const float* __restrict__ k,
                const float* __restrict__ v, const float* __restrict__ lse,
                const float* __restrict__ dout, const float* __restrict__ delta,
                float* __restrict__ dk, float* __restrict__ dv, int64_t batch_heads, int64_t l_len,
                int64_t s_len, int d, float scale, bool causal, AttentionMask mask,
                Dropout dropout) {
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t key_row = int64_t{blockIdx.x} * kRowWarps + threadIdx.x / kWarpSize;
       key_row < batch_heads * s_len; key_row += int64_t{gridDim.x} * kRowWarps) {
    const int64_t h = key_row / s_len, s = key_row % s_len;
    float kr[kMaxPerLane], vr[kMaxPerLane], dk_acc[kMaxPerLane] = {}, dv_acc[kMaxPerLane] = {};
    load_row(k + key_row * d, d, lane, kr);
    load_row(v + key_row * d, d, lane, vr);
    for (int64_t l = causal ? s : 0; l < l_len; ++l) {  // the queries that attend key s
      const int64_t row = h * l_len + l;
      float qr[kMaxPerLane], dor[kMaxPerLane];
      load_row(q + row * d, d, lane, qr);
      load_row(dout + row * d, d, lane, dor);
      const float p = expf(warp_dot(qr, kr) * scale + mask_term(mask, h, l, s) - lse[row]);
      const float f = dropout.factor(h, l, s);
      const float ds = p * (f * warp_dot(dor, vr) - delta[row]);
#pragma unroll
      for (int i = 0; i < kMaxPerLane; ++i) {
        dv_acc[i] += p * f * dor[i];
        dk_acc[i] += ds * qr[i];
      }
    }
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) dk_acc[i] *= scale;
    store_row(dk + key_row * d, d, lane, dk_acc);
    store_row(dv + key_row * d, d, lane, dv_acc);
  }
}

__global__ void __launch_bounds__(kRowThreads)
    dq_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
              const float* __restrict__ lse, const float* __restrict__ dout,
              const float* __restrict__ delta, float* __restrict__ dq, int64_t batch_heads,
              int64_t l_len, int64_t s_len, int d, float scale, bool causal, AttentionMask mask,
              Dropout dropout) {
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t row = int64_t{blockIdx.x} * kRowWarps + threadIdx.x / kWarpSize;
       row < batch_heads * l_len; row += int64_t{gridDim.x} * kRowWarps) {
    const int64_t h = row / l_len, l = row % l_len;
    float qr[kMaxPerLane], dor[kMaxPerLane], dq_acc[kMaxPerLane] = {};
    load_row(q + row * d, d, lane, qr);
    load_row(dout + row * d, d, lane, dor);
    const float row_lse = lse[row], row_delta = delta[row];
    const int64_t keys = keys_for(causal, l, s_len);
    for (int64_t s = 0; s < keys; ++s) {
      const int64_t key_row = h * s_len + s;
      float kr[kMaxPerLane], vr[kMaxPerLane];
      load_row(k + key_row * d, d, lane, kr);
      load_row(v + key_row * d, d, lane, vr);
      const float p = expf(warp_dot(qr, kr) * scale + mask_term(mask, h, l, s) - row_lse);
      const float ds = p * (dropout.factor(h, l, s) * warp_dot(dor, vr) - row_delta);
#pragma unroll
      for (int i = 0; i < kMaxPerLane; ++i) dq_acc[i] += ds * kr[i];
    }
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) dq_acc[i] *= scale;
    store_row(dq + row * d, d, lane, dq_acc);
  }
}

}  // namespace

void launch_delta(const float* o, const float* dout, float* delta, int64_t rows, int d) {
  KILN_LAUNCH(static_cast<unsigned>(blocks_for(rows, kRowWarps)), kRowThreads, 0, cuda::stream(),
              delta_kernel)
  (o, dout, delta, rows, d);
  KILN_CUDA_CHECK_LAUNCH();
}

void v1_recompute_backward(const AttentionBackwardArgs& a) {
  check_shape("v1_recompute", a.batch_heads, a.l, a.s, a.d);
  check_dropout("v1_recompute", a.dropout);
  if (a.batch_heads == 0) return;
  const int d = static_cast<int>(a.d);
  auto* delta = static_cast<float*>(a.workspace);
  const int64_t rows = a.batch_heads * a.l, key_rows = a.batch_heads * a.s;
  if (rows > 0) launch_delta(a.o, a.dout, delta, rows, d);
  if (key_rows > 0) {
    KILN_LAUNCH(static_cast<unsigned>(blocks_for(key_rows, kRowWarps)), kRowThreads, 0,
                cuda::stream(), dkdv_kernel)
    (a.q, a.k, a.v, a.lse, a.dout, delta, a.dk, a.dv, a.batch_heads, a.l, a.s, d, a.scale, a.causal,
     a.mask, dropout_of(a.dropout, a.l, a.s));
    KILN_CUDA_CHECK_LAUNCH();
  }
  if (rows > 0) {
    KILN_LAUNCH(static_cast<unsigned>(blocks_for(rows, kRowWarps)), kRowThreads, 0, cuda::stream(),
                dq_kernel)
    (a.q, a.k, a.v, a.lse, a.dout, delta, a.dq, a.batch_heads, a.l, a.s, d, a.scale, a.causal,
     a.mask, dropout_of(a.dropout, a.l, a.s));
    KILN_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace kiln::lab::attention
