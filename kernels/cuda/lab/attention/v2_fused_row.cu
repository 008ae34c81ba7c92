// Attention v2: one kernel, a warp per query row, the online softmax (softmax/online.h) carried
// into the output. v1 stores the L x S scores only to read them back; here the warp walks the
// keys its query attends, one at a time, and keeps the row's running max m, running sum l and an
// unnormalised output o (D floats spread over the lanes, D / 32 each), rescaling both whenever
// the max grows:
//
//   for s in keys_for(l):
//     x = scale * warp_sum(q . k_s)                // each lane D / 32 products, 5 shuffles
//     m' = max(m, x);  c = exp(m - m');  p = exp(x - m')
//     l = l c + p;  o = o c + p v_s;  m = m'
//   O[l] = o / l;  lse[l] = m + log(l)
//
// What it changes: no L x S matrix (the workspace is unused), one launch, and every load
// coalesced (lane j reads elements j, j + 32, ... of a row: the warp reads a row of K or V in
// D / 32 requests of 128 bytes).
// What it leaves: each warp reads all of K and V for its one query, so K and V cross from L2 L
// times a head, and the two exps and a 5-shuffle sum a key serialise the warp. v3 shares the
// K and V it loads among many queries.
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

__global__ void __launch_bounds__(kRowThreads)
    fused_row_kernel(const float* __restrict__ q, const float* __restrict__ k,
                     const float* __restrict__ v, float* __restrict__ o, float* __restrict__ lse,
                     int64_t batch_heads, int64_t l_len, int64_t s_len, int d, float scale,
                     bool causal) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t rows = batch_heads * l_len;
  for (int64_t row = int64_t{blockIdx.x} * kRowWarps + threadIdx.x / kWarpSize; row < rows;
       row += int64_t{gridDim.x} * kRowWarps) {
    const int64_t h = row / l_len, l = row % l_len;
    const float* kh = k + h * s_len * d;
    const float* vh = v + h * s_len * d;
    // Lane j holds elements j, j + 32, ... of the query and of the output.
    float qr[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int c = lane + i * kWarpSize;
      qr[i] = c < d ? q[row * d + c] : 0.0f;
      acc[i] = 0.0f;
    }
    float max = -INFINITY, sum = 0.0f;
    const int64_t keys = keys_for(causal, l, s_len);
    for (int64_t s = 0; s < keys; ++s) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxPerLane; ++i) {
        const int c = lane + i * kWarpSize;
        if (c < d) dot += qr[i] * kh[s * d + c];
      }
      const float x = cuda::warp_allreduce(dot, cuda::Sum{}) * scale;
      const float new_max = fmaxf(max, x);
      const float correction = expf(max - new_max);  // expf(-inf) = 0 at the first key
      const float p = expf(x - new_max);
      sum = sum * correction + p;
#pragma unroll
      for (int i = 0; i < kMaxPerLane; ++i) {
        const int c = lane + i * kWarpSize;
        if (c < d) acc[i] = acc[i] * correction + p * vh[s * d + c];
      }
      max = new_max;
    }
    const float inverse = 1.0f / sum;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int c = lane + i * kWarpSize;
      if (c < d) o[row * d + c] = acc[i] * inverse;
    }
    if (lane == 0) lse[row] = max + logf(sum);
  }
}

}  // namespace

void v2_fused_row(const AttentionArgs& a) {
  check_shape("v2_fused_row", a.batch_heads, a.l, a.s, a.d);
  check_plain("v2_fused_row", a.mask, a.dropout);
  check_f32("v2_fused_row", a.dtype);
  if (a.batch_heads == 0 || a.l == 0) return;
  KILN_LAUNCH(static_cast<unsigned>(blocks_for(a.batch_heads * a.l, kRowWarps)), kRowThreads, 0,
              cuda::stream(), fused_row_kernel)
  (static_cast<const float*>(a.q), static_cast<const float*>(a.k), static_cast<const float*>(a.v),
   a.o, a.lse, a.batch_heads, a.l, a.s, static_cast<int>(a.d), a.scale, a.causal);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::attention
