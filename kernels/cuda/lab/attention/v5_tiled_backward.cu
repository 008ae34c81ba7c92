// Attention backward v5: tiled, in FlashAttention-2's loop order for the backward (Dao, 2023,
// Algorithm 2). v1_recompute walks a whole row per warp and computes every score twice (once for
// dK and dV, once for dQ); here a block owns a tile of Bc = 32 keys of a head, keeps K_j and V_j
// in shared memory and their gradients in registers, and walks the query tiles that attend them,
// computing each score once and adding its share of dQ with atomics:
//
//   delta_l = dO_l . O_l                          (v1_recompute's delta kernel)
//   dQ = 0
//   for each key tile j (a block):                load K_j, V_j into shared memory
//     for each query tile i (Br = 8 rows) that sees a key of j:   load Q_i, dO_i
//       a warp per 2 rows, lane c scores key c:   p = exp(scale q . k_c + M - lse), f its keep
//                                                 factor, P~ = p f, dS = p (f dO . v_c - delta)
//       dV_j += P~^T dO_i;  dK_j += dS^T Q_i      (a thread per key and every 4th column)
//       dQ_i += scale dS K_j                      (atomicAdd: every key tile adds into it)
//   write scale dK_j and dV_j
//
// What it changes against v1_recompute: each score and its exp once, not twice; K and V read
// once a head, Q, dO, lse and delta once per key tile (S / 32 times a head, from L2 mostly), and
// dQ added to once per key tile with atomics (4 L D S / 32 bytes of atomics a head). The price of
// the atomics: the additions into dQ arrive in any order, so its last bits may differ from run to
// run (v1_recompute's do not). The mask tensor and dropout are v1_recompute's (mask_dropout.h).
// What it leaves: f32 on the CUDA cores (a tensor-core backward would use v4's fragments), and
// 8-row query tiles, which shared memory bounds at D = 128 with K and V padded.
//
// measured: not yet on a GPU.
#include <cmath>
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/lab/attention/mask_dropout.h"
#include "kiln/kernels/cuda/lab/attention/problem.h"
#include "kiln/kernels/cuda/lab/attention/tiling.h"
#include "kiln/kernels/cuda/lab/attention/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::attention {

namespace {

static_assert(kV5KeyTile == kWarpSize, "lane c scores key c of the tile");
static_assert(v5_shared_bytes() <= 48 * 1024, "v5's tiles fit the static shared memory");

constexpr int kV5Columns = kMaxHeadDim / kV5Warps;  // a thread's columns of dK and dV, at most

__global__ void __launch_bounds__(kV5Threads) zero_kernel(float* __restrict__ x, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * kV5Threads + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kV5Threads)
    x[i] = 0.0f;
}

__global__ void __launch_bounds__(kV5Threads)
    tiled_backward_kernel(const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, const float* __restrict__ lse,
                          const float* __restrict__ dout, const float* __restrict__ delta,
                          float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv,
                          int64_t batch_heads, int l_len, int s_len, int d, float scale,
                          bool causal, AttentionMask mask, Dropout dropout) {
  __shared__ float k_tile[kV5KeyTile][kV5Stride];
  __shared__ float v_tile[kV5KeyTile][kV5Stride];
  __shared__ float q_tile[kV5QueryTile][kMaxHeadDim];
  __shared__ float do_tile[kV5QueryTile][kMaxHeadDim];
  __shared__ float p_tile[kV5QueryTile][kV5KeyTile];   // P~ = P * keep factor
  __shared__ float ds_tile[kV5QueryTile][kV5KeyTile];  // dS
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int key_tiles = (s_len + kV5KeyTile - 1) / kV5KeyTile;
  for (int64_t b = blockIdx.x; b < batch_heads * key_tiles; b += gridDim.x) {
    const int64_t h = b / key_tiles;
    const int j0 = static_cast<int>(b % key_tiles) * kV5KeyTile;
    const float* qh = q + h * l_len * d;
    const float* kh = k + h * s_len * d;
    const float* vh = v + h * s_len * d;
    const float* doh = dout + h * l_len * d;
    const int64_t first_row = h * l_len;  // of the head, in lse, delta and dq
    __syncthreads();  // the previous tile's readers are done with k_tile and v_tile
    for (int e = threadIdx.x; e < kV5KeyTile * d; e += kV5Threads) {
      const int c = e / d, i = e % d;
      const bool inside = j0 + c < s_len;
      k_tile[c][i] = inside ? kh[int64_t{j0 + c} * d + i] : 0.0f;
      v_tile[c][i] = inside ? vh[int64_t{j0 + c} * d + i] : 0.0f;
    }
    // This thread's key (lane) and columns (warp, warp + 4, ...) of dK_j and dV_j.
    float dk_acc[kV5Columns] = {}, dv_acc[kV5Columns] = {};
    // With the causal mask the query tiles wholly before key j0 see none of this tile.
    const int first_query = causal ? j0 / kV5QueryTile * kV5QueryTile : 0;
    for (int i0 = first_query; i0 < l_len; i0 += kV5QueryTile) {
      __syncthreads();  // the K/V tile is in; every thread is done with the previous Q tile
      for (int e = threadIdx.x; e < kV5QueryTile * d; e += kV5Threads) {
        const int r = e / d, i = e % d;
        const bool inside = i0 + r < l_len;
        q_tile[r][i] = inside ? qh[int64_t{i0 + r} * d + i] : 0.0f;
        do_tile[r][i] = inside ? doh[int64_t{i0 + r} * d + i] : 0.0f;
      }
      __syncthreads();
      for (int rr = 0; rr < kV5RowsPerWarp; ++rr) {
        const int r = warp * kV5RowsPerWarp + rr, l = i0 + r, key = j0 + lane;
        float p = 0.0f, ds = 0.0f;
        if (l < l_len && key < s_len && attends(causal, l, key)) {
          float dot = 0.0f, dpv = 0.0f;
          for (int i = 0; i < d; ++i) {
            dot += q_tile[r][i] * k_tile[lane][i];
            dpv += do_tile[r][i] * v_tile[lane][i];
          }
          const int64_t row = first_row + l;
          p = expf(dot * scale + mask_term(mask, h, l, key) - lse[row]);
          const float f = dropout.factor(h, l, key);
          ds = p * (f * dpv - delta[row]);
          p *= f;
        }
        p_tile[r][lane] = p;
        ds_tile[r][lane] = ds;
      }
      __syncthreads();
      // dV_j += P~^T dO_i and dK_j += dS^T Q_i: thread (warp, lane) takes key `lane`, columns
      // warp, warp + 4, ...; a warp reads one dO/Q element (a broadcast) and 32 P~/dS ones.
#pragma unroll
      for (int x = 0; x < kV5Columns; ++x) {
        const int i = warp + x * kV5Warps;
        if (i >= d) break;
        float dv_sum = 0.0f, dk_sum = 0.0f;
        for (int r = 0; r < kV5QueryTile; ++r) {
          dv_sum += p_tile[r][lane] * do_tile[r][i];
          dk_sum += ds_tile[r][lane] * q_tile[r][i];
        }
        dv_acc[x] += dv_sum;
        dk_acc[x] += dk_sum;
      }
      // dQ_i += scale dS K_j, added into memory: the other key tiles of the head add there too.
      for (int e = threadIdx.x; e < kV5QueryTile * d; e += kV5Threads) {
        const int r = e / d, i = e % d;
        if (i0 + r >= l_len) break;  // e grows with r: every later e is past L too
        float sum = 0.0f;
        for (int c = 0; c < kV5KeyTile; ++c) sum += ds_tile[r][c] * k_tile[c][i];
        atomicAdd(&dq[(first_row + i0 + r) * d + i], sum * scale);
      }
    }
    const int key = j0 + lane;
    if (key < s_len) {
      const int64_t key_row = h * s_len + key;
#pragma unroll
      for (int x = 0; x < kV5Columns; ++x) {
        const int i = warp + x * kV5Warps;
        if (i >= d) break;
        dk[key_row * d + i] = dk_acc[x] * scale;
        dv[key_row * d + i] = dv_acc[x];
      }
    }
  }
}

}  // namespace

void v5_tiled_backward(const AttentionBackwardArgs& a) {
  check_shape("v5_tiled", a.batch_heads, a.l, a.s, a.d);
  check_dropout("v5_tiled", a.dropout);
  if (a.batch_heads == 0) return;
  const int d = static_cast<int>(a.d);
  auto* delta = static_cast<float*>(a.workspace);
  const int64_t rows = a.batch_heads * a.l, key_rows = a.batch_heads * a.s;
  if (rows > 0) {
    launch_delta(a.o, a.dout, delta, rows, d);
    KILN_LAUNCH(static_cast<unsigned>(blocks_for(rows * d, kV5Threads)), kV5Threads, 0,
                cuda::stream(), zero_kernel)
    (a.dq, rows * d);
    KILN_CUDA_CHECK_LAUNCH();
  }
  if (key_rows > 0) {
    KILN_LAUNCH(static_cast<unsigned>(blocks_for(v5_blocks(a.batch_heads, a.s), 1)), kV5Threads, 0,
                cuda::stream(), tiled_backward_kernel)
    (a.q, a.k, a.v, a.lse, a.dout, delta, a.dq, a.dk, a.dv, a.batch_heads, static_cast<int>(a.l),
     static_cast<int>(a.s), d, a.scale, a.causal, a.mask, dropout_of(a.dropout, a.l, a.s));
    KILN_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace kiln::lab::attention
