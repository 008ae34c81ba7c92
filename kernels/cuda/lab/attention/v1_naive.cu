// Attention v1: naive, three kernels, the textbook formula one step at a time. The first writes
// every score S[l, s] = scale q_l . k_s (-inf where the mask hides it) to an L x S matrix in the
// workspace, a thread per score; the second turns each row into its softmax in place, a warp per
// row (softmax v3's online pass, then the write) and saves the row's log-sum-exp; the third reads
// the L x S probabilities again for O = P V, a thread per output element:
//
//   scores:  S[l][s] = attends(l, s) ? scale * dot(q[l], k[s]) : -inf      // L S D reads of K
//   softmax: (m, sum) = online(S[l]);  P[l][s] = exp(S[l][s] - m) / sum;  lse[l] = m + log(sum)
//   P V:     O[l][i] = sum_s P[l][s] * V[s][i]
//
// What it costs: the L x S matrix goes to memory and back three times (written; read and
// written; read: 16 L S bytes a head on top of the inputs). Each score's thread reads a row of Q
// and a row of K, and a warp's 32 lanes read 32 rows of K D floats apart (uncoalesced); each
// output's thread reads a row of P and a column of V: L S D loads of each a head, which the
// caches catch only in part (docs/kernels/attention.md counts them). With the mask the kernels
// still visit every (l, s): the masked half of the matrix costs what the rest does.
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
#include "kiln/kernels/cuda/lab/softmax/online.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::attention {

namespace {

using softmax::CombineMaxSum;
using softmax::empty_max_sum;
using softmax::MaxSum;
using softmax::online_update;

__global__ void __launch_bounds__(kNaiveThreads)
    scores_kernel(const float* __restrict__ q, const float* __restrict__ k,
                  float* __restrict__ scores, int64_t batch_heads, int64_t l_len, int64_t s_len,
                  int64_t d, float scale, bool causal) {
  const int64_t total = batch_heads * l_len * s_len;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = i % s_len, l = i / s_len % l_len, h = i / (s_len * l_len);
    if (!attends(causal, l, s)) {
      scores[i] = -INFINITY;
      continue;
    }
    const float* qr = q + (h * l_len + l) * d;
    const float* kr = k + (h * s_len + s) * d;
    float dot = 0.0f;
    for (int64_t j = 0; j < d; ++j) dot += qr[j] * kr[j];
    scores[i] = dot * scale;
  }
}

__global__ void __launch_bounds__(kRowThreads)
    softmax_kernel(float* __restrict__ scores, float* __restrict__ lse, int64_t rows,
                   int64_t s_len) {
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t row = int64_t{blockIdx.x} * kRowWarps + threadIdx.x / kWarpSize; row < rows;
       row += int64_t{gridDim.x} * kRowWarps) {
    float* p = scores + row * s_len;
    MaxSum state = empty_max_sum();
    for (int64_t s = lane; s < s_len; s += kWarpSize) online_update(state, p[s]);
    state = cuda::warp_allreduce(state, CombineMaxSum{});
    const float inverse = 1.0f / state.sum;
    for (int64_t s = lane; s < s_len; s += kWarpSize) p[s] = expf(p[s] - state.max) * inverse;
    if (lane == 0) lse[row] = state.max + logf(state.sum);
  }
}

__global__ void __launch_bounds__(kNaiveThreads)
    pv_kernel(const float* __restrict__ p, const float* __restrict__ v, float* __restrict__ o,
              int64_t batch_heads, int64_t l_len, int64_t s_len, int64_t d) {
  const int64_t total = batch_heads * l_len * d;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = i % d, row = i / d, h = row / l_len;
    const float* pr = p + row * s_len;
    const float* vh = v + h * s_len * d;
    float acc = 0.0f;
    for (int64_t s = 0; s < s_len; ++s) acc += pr[s] * vh[s * d + j];
    o[i] = acc;
  }
}

}  // namespace

void v1_naive(const AttentionArgs& a) {
  check_shape("v1_naive", a.batch_heads, a.l, a.s, a.d);
  check_plain("v1_naive", a.mask, a.dropout);
  check_f32("v1_naive", a.dtype);
  if (a.batch_heads == 0 || a.l == 0) return;
  const auto* q = static_cast<const float*>(a.q);
  const auto* k = static_cast<const float*>(a.k);
  const auto* v = static_cast<const float*>(a.v);
  auto* scores = static_cast<float*>(a.workspace);
  const int64_t rows = a.batch_heads * a.l;
  KILN_LAUNCH(static_cast<unsigned>(blocks_for(rows * a.s, kNaiveThreads)), kNaiveThreads, 0,
              cuda::stream(), scores_kernel)
  (q, k, scores, a.batch_heads, a.l, a.s, a.d, a.scale, a.causal);
  KILN_CUDA_CHECK_LAUNCH();
  KILN_LAUNCH(static_cast<unsigned>(blocks_for(rows, kRowWarps)), kRowThreads, 0, cuda::stream(),
              softmax_kernel)
  (scores, a.lse, rows, a.s);
  KILN_CUDA_CHECK_LAUNCH();
  KILN_LAUNCH(static_cast<unsigned>(blocks_for(rows * a.d, kNaiveThreads)), kNaiveThreads, 0,
              cuda::stream(), pv_kernel)
  (scores, v, a.o, a.batch_heads, a.l, a.s, a.d);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::attention
