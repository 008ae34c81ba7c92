// Attention v3: tiles in shared memory, in FlashAttention-1's loop order (Dao et al., 2022,
// Algorithm 1). v2 has each query's warp read all of K and V on its own; here a block loads a tile
// of Bc = 32 keys and values into shared memory once and runs every query of the head against it
// before moving on: K and V are read from memory once a head. The loop order is FlashAttention-1's,
// K/V tiles outside and query tiles inside, so the running state of each query row (its max m,
// its sum l, and its output O, normalised) cannot stay on chip: it goes to memory after each key
// tile and comes back for the next:
//
//   for each K/V tile j (Bc keys):                               load K_j, V_j into shared memory
//     for each query tile i (Br = 16 rows) that sees a key of j:  load Q_i into shared memory
//       a warp per row: x_c = scale q . k_c (lane c: key c), m~ = max x, p_c = exp(x_c - m~),
//                       l~ = sum p;  m, l, O from memory (none at j = 0)
//       m' = max(m, m~);  l' = exp(m - m') l + exp(m~ - m') l~
//       O = (l exp(m - m') O + exp(m~ - m') P V_j) / l'    ->  O, m', l' back to memory
//   lse = m + log(l)
//
// With the mask a K/V tile skips the query tiles wholly before it (every key after every query),
// and the K/V tiles past the last query: about half the pairs. A block per head (the paper's grid
// was batch x heads too): the key tiles of a head follow each other, as each updates every row.
//
// What it costs: K and V are read once, but Q is read once per K/V tile and O read and written
// once per K/V tile: 12 L D S / Bc bytes a head (the running m and l add 16 L S / Bc), against
// the 16 L S of v1's matrix: more than v1 once D > 4 Bc / 3, i.e. at D = 64. The parallelism is a
// block per head, too few blocks for a GPU unless batch x heads is in the hundreds.
// FlashAttention-2 (v4) swaps the loops: a block owns query rows, and O stays in registers.
//
// The mask tensor and dropout (what kiln's op routes here, mask_dropout.h): M_ls is added to the
// score, and a key tile's P reaches P V multiplied by its keep factors while l~ sums the undropped
// P. A row whose first key tile is wholly masked starts its state there (m = -inf, l = 0, O = 0),
// and a row that sees no key at all ends as NaN (O and lse), a softmax of nothing.
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

static_assert(kV3KeyTile == kWarpSize, "lane c scores key c of the tile");
static_assert(v3_shared_bytes() <= 48 * 1024, "v3's tiles fit the static shared memory");

__global__ void __launch_bounds__(kV3Threads)
    tiled_fa1_kernel(const float* __restrict__ q, const float* __restrict__ k,
                     const float* __restrict__ v, float* __restrict__ o, float* __restrict__ lse,
                     float* __restrict__ running_max, float* __restrict__ running_sum,
                     int64_t batch_heads, int l_len, int s_len, int d, float scale, bool causal,
                     AttentionMask mask, Dropout dropout) {
  __shared__ float q_tile[kV3QueryTile][kMaxHeadDim];
  __shared__ float k_tile[kV3KeyTile][kV3KStride];
  __shared__ float v_tile[kV3KeyTile][kMaxHeadDim];
  __shared__ float p_tile[kV3QueryTile][kV3KeyTile];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int64_t h = blockIdx.x; h < batch_heads; h += gridDim.x) {
    const float* qh = q + h * l_len * d;
    const float* kh = k + h * s_len * d;
    const float* vh = v + h * s_len * d;
    const int64_t first_row = h * l_len;  // of the head, in o, lse and the running state
    // With the mask no query sees a key past the last query.
    const int key_end = causal ? (l_len < s_len ? l_len : s_len) : s_len;
    for (int j0 = 0; j0 < key_end; j0 += kV3KeyTile) {
      __syncthreads();  // every warp is done with the previous tiles
      for (int e = threadIdx.x; e < kV3KeyTile * d; e += kV3Threads) {
        const int c = e / d, i = e % d;
        const bool inside = j0 + c < s_len;
        k_tile[c][i] = inside ? kh[int64_t{j0 + c} * d + i] : 0.0f;
        v_tile[c][i] = inside ? vh[int64_t{j0 + c} * d + i] : 0.0f;
      }
      // With the mask, the query tiles wholly before key j0 see none of this tile.
      const int first_query = causal ? j0 / kV3QueryTile * kV3QueryTile : 0;
      for (int i0 = first_query; i0 < l_len; i0 += kV3QueryTile) {
        __syncthreads();  // the K/V tile is in; every warp is done with the previous Q tile
        for (int e = threadIdx.x; e < kV3QueryTile * d; e += kV3Threads) {
          const int r = e / d, i = e % d;
          q_tile[r][i] = i0 + r < l_len ? qh[int64_t{i0 + r} * d + i] : 0.0f;
        }
        __syncthreads();
        for (int rr = 0; rr < kV3RowsPerWarp; ++rr) {
          const int r = warp * kV3RowsPerWarp + rr, l = i0 + r;
          if (l >= l_len) break;  // the same for the whole warp
          const int64_t row = first_row + l;
          // The state so far, read by every lane before the shuffles below, so before lane 0
          // writes it back.
          const float old_max = j0 == 0 ? -INFINITY : running_max[row];
          const float old_sum = j0 == 0 ? 0.0f : running_sum[row];
          const int key = j0 + lane;
          float x = -INFINITY;
          if (key < s_len && attends(causal, l, key)) {
            float dot = 0.0f;
            for (int i = 0; i < d; ++i) dot += q_tile[r][i] * k_tile[lane][i];
            x = dot * scale + mask_term(mask, h, l, key);
          }
          const float tile_max = cuda::warp_allreduce(x, cuda::Max{});
          if (tile_max == -INFINITY) {  // this row sees no key of the tile
            if (j0 == 0) {              // the state starts here: nothing seen
              for (int i = lane; i < d; i += kWarpSize) o[row * d + i] = 0.0f;
              if (lane == 0) running_max[row] = -INFINITY, running_sum[row] = 0.0f;
            }
            continue;
          }
          const float p = expf(x - tile_max);  // 0 where masked
          const float tile_sum = cuda::warp_allreduce(p, cuda::Sum{});
          // What reaches P V is dropped; the sum is the undropped softmax's.
          p_tile[r][lane] = x == -INFINITY ? 0.0f : p * dropout.factor(h, l, key);
          __syncwarp();
          const float new_max = fmaxf(old_max, tile_max);
          const float old_weight = old_sum * expf(old_max - new_max);  // 0 at j0 = 0
          const float tile_weight = expf(tile_max - new_max);
          const float new_sum = old_weight + tile_weight * tile_sum;
          const float inverse = 1.0f / new_sum;
          for (int i = lane; i < d; i += kWarpSize) {
            float pv = 0.0f;
            for (int c = 0; c < kV3KeyTile; ++c) pv += p_tile[r][c] * v_tile[c][i];
            const float old_o = j0 == 0 ? 0.0f : o[row * d + i];
            o[row * d + i] = (old_weight * old_o + tile_weight * pv) * inverse;
          }
          if (lane == 0) {
            running_max[row] = new_max;
            running_sum[row] = new_sum;
          }
        }
      }
    }
    __syncthreads();  // every warp's running state is written
    for (int l = threadIdx.x; l < l_len; l += kV3Threads) {
      const int64_t row = first_row + l;
      if (running_sum[row] == 0.0f) {  // no key seen: the softmax of nothing
        lse[row] = NAN;
        for (int i = 0; i < d; ++i) o[row * d + i] = NAN;
        continue;
      }
      lse[row] = running_max[row] + logf(running_sum[row]);
    }
  }
}

}  // namespace

void v3_tiled_fa1(const AttentionArgs& a) {
  check_shape("v3_tiled_fa1", a.batch_heads, a.l, a.s, a.d);
  check_f32("v3_tiled_fa1", a.dtype);
  check_dropout("v3_tiled_fa1", a.dropout);
  if (a.batch_heads == 0 || a.l == 0) return;
  KILN_LAUNCH(static_cast<unsigned>(blocks_for(a.batch_heads, 1)), kV3Threads, 0, cuda::stream(),
              tiled_fa1_kernel)
  (static_cast<const float*>(a.q), static_cast<const float*>(a.k), static_cast<const float*>(a.v),
   a.o, a.lse, v3_running_max(a.workspace), v3_running_sum(a.workspace, a.batch_heads, a.l),
   a.batch_heads, static_cast<int>(a.l), static_cast<int>(a.s), static_cast<int>(a.d), a.scale,
   a.causal, a.mask, dropout_of(a.dropout, a.l, a.s));
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::attention
