// Attention v4: tensor cores, in FlashAttention-2's split of the work (Dao, 2023). Two changes
// to v3. The loops swap: a block owns kV4QueryTile = 64 query rows of a head and streams every
// K/V tile past them, so a row's running max, sum and output never leave the registers, and Q
// is read once. Within the block each of the 4 warps owns 16 of the rows for the whole pass (no
// two warps share a row, so the softmax's statistics need no shared memory and no barrier, only
// shuffles within groups of 4 lanes). And the two products run on the tensor cores, as the
// tensor-core GEMM lab's (gemm_tc/mma.cuh), from bf16 or f16 inputs with f32 accumulation:
//
//   Q fragments: ldmatrix from the shared Q tile, once          (16 x D: D / 16 A fragments)
//   for each K/V tile of 32 keys (with the mask: up to the block's last query):
//     S = Q K^T:  ldmatrix (K rows are B's columns: no transpose), D / 16 x 4 mma.m16n8k16
//     x = scale S, -inf where masked;  m' = max(m, rowmax x) (2 shuffles)
//     P = exp(x - m'); l = l exp(m - m') + rowsum P; O *= exp(m - m')
//     O += P V:   P's accumulators are A's fragments as they stand (the m16n8 layout of two
//                 adjacent n tiles is the m16k16 A layout), rounded to bf16/f16 in registers;
//                 V through ldmatrix.trans, 2 x D / 8 mma.m16n8k16
//   O /= l (the quad's partial sums of l added at the end); lse = m + log l
//
// What it changes against v3: Q read once and O written once (no O traffic per key tile); K and
// V read once per 64 queries (L / 64 times a head, from L2 mostly); a block per 64 queries of a
// head, B H L / 64 blocks; and 16 x 8 x 16 products per instruction. What it leaves: the K/V
// loads go through registers with a barrier each tile (gemm_tc v2's cp.async pipeline would
// overlap them), and P is rounded to 16 bits before P V, as FlashAttention-2 does: the reason
// its tolerance is the 16-bit one.
//
// The head dimension is a template argument (its fragments are register arrays): 16, 32, 64 or
// 128. The instructions are Ampere's (sm_80); an older GPU gets gemm_tc's refusal.
//
// The mask tensor and dropout (what kiln's op routes here, mask_dropout.h): M is added to each
// scaled score as it is masked (a load a score, from L2 mostly: the [L, S] masks kiln passes
// broadcast over heads), and P's keep factors (a Philox evaluation a score) multiply P as it is
// packed for P V while l sums the undropped P. A row that sees no key ends as NaN (O and lse).
//
// measured: not yet on a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/kernels/cuda/lab/attention/mask_dropout.h"
#include "kiln/kernels/cuda/lab/attention/problem.h"
#include "kiln/kernels/cuda/lab/attention/tiling.h"
#include "kiln/kernels/cuda/lab/attention/versions.h"
#include "kiln/kernels/cuda/lab/gemm_tc/mma.cuh"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::attention {

namespace {

using gemm_tc::ldmatrix_x4;
using gemm_tc::ldmatrix_x4_trans;
using gemm_tc::mma_m16n8k16;
using gemm_tc::shared_address;

// Two floats as one register of two 16-bit values, the first in the low half (the order of a
// fragment's elements).
template <class T>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  const T a(lo), b(hi);
  unsigned short a_bits, b_bits;
  std::memcpy(&a_bits, &a, 2);
  std::memcpy(&b_bits, &b, 2);
  return static_cast<unsigned>(a_bits) | static_cast<unsigned>(b_bits) << 16;
}

// Rows of 16-bit elements into a shared tile [rows][stride] in 16-byte pieces; zeros past `valid`.
template <class T, int kD, int kRows>
__device__ __forceinline__ void load_tile(T* tile, const T* __restrict__ src, int first,
                                          int valid) {
  constexpr int kChunks = kD / 8;  // 16 bytes each
  constexpr int kStride = v4_stride(kD);
  for (int e = threadIdx.x; e < kRows * kChunks; e += kV4Threads) {
    const int r = e / kChunks, c = e % kChunks * 8;
    *reinterpret_cast<uint4*>(&tile[r * kStride + c]) =
        first + r < valid ? *reinterpret_cast<const uint4*>(&src[int64_t{first + r} * kD + c])
                          : make_uint4(0, 0, 0, 0);
  }
}

template <class T, int kD, bool kDropout>
__global__ void __launch_bounds__(kV4Threads)
    mma_fa2_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   float* __restrict__ o, float* __restrict__ lse, int64_t batch_heads, int l_len,
                   int s_len, float scale, bool causal, AttentionMask mask, Dropout dropout) {
  constexpr int kStride = v4_stride(kD);
  constexpr int kSteps = kD / kMmaK;             // k steps of Q K^T
  constexpr int kOutTiles = kD / kMmaN;          // n tiles of O
  constexpr int kKeyTiles = kV4KeyTile / kMmaN;  // n tiles of S
  constexpr int kKeySteps = kV4KeyTile / kMmaK;  // k steps of P V
  static_assert(v4_conflict_free(kD) && v4_shared_bytes(kD) <= 48 * 1024);
  __shared__ __align__(16) T q_tile[kV4QueryTile * kStride];
  __shared__ __align__(16) T k_tile[kV4KeyTile * kStride];
  __shared__ __align__(16) T v_tile[kV4KeyTile * kStride];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int g = lane / 4, t = lane % 4;  // the fragment's row group and column pair
  const int64_t query_tiles = (l_len + kV4QueryTile - 1) / kV4QueryTile;
  for (int64_t b = blockIdx.x; b < batch_heads * query_tiles; b += gridDim.x) {
    const int64_t h = b / query_tiles;
    const int i0 = static_cast<int>(b % query_tiles) * kV4QueryTile;
    const T* qh = q + h * l_len * kD;
    const T* kh = k + h * s_len * kD;
    const T* vh = v + h * s_len * kD;
    __syncthreads();  // the previous block-tile's readers are done with q_tile
    load_tile<T, kD, kV4QueryTile>(q_tile, qh, i0, l_len);
    __syncthreads();
    unsigned qa[kSteps][4];
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
      ldmatrix_x4(qa[kk],
                  shared_address(
                      &q_tile[(warp * kMmaM + lane % 16) * kStride + kk * kMmaK + lane / 16 * 8]));
    // This lane's two rows: g and g + 8 of the warp's 16.
    const int rows[2] = {i0 + warp * kMmaM + g, i0 + warp * kMmaM + g + 8};
    float acc[kOutTiles][4] = {};
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    const int key_end = causal ? (i0 + kV4QueryTile < s_len ? i0 + kV4QueryTile : s_len) : s_len;
    for (int j0 = 0; j0 < key_end; j0 += kV4KeyTile) {
      __syncthreads();  // every warp is done with the previous K/V tile
      load_tile<T, kD, kV4KeyTile>(k_tile, kh, j0, s_len);
      load_tile<T, kD, kV4KeyTile>(v_tile, vh, j0, s_len);
      __syncthreads();
      // S = Q K^T. K's tile is [key][d]: B (d x key) column-major, as ldmatrix gives it. Matrix
      // m of the x4 holds keys n0 + m / 2 * 8.., d kk + m % 2 * 8..: B's two halves of k for two
      // n tiles.
      float s_acc[kKeyTiles][4] = {};
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
        for (int n = 0; n < kKeyTiles; n += 2) {
          unsigned r[4];
          const int key = n * kMmaN + lane / 16 * 8 + lane % 8, col = kk * kMmaK + lane / 8 % 2 * 8;
          ldmatrix_x4(r, shared_address(&k_tile[key * kStride + col]));
          const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
          mma_m16n8k16<T>(s_acc[n], qa[kk], b0);
          mma_m16n8k16<T>(s_acc[n + 1], qa[kk], b1);
        }
      // Scale and mask; accumulator e of tile n sits at row rows[e / 2], key n * 8 + 2t + e % 2.
      // The rows past L score nothing: they are never stored, and the mask has no row for them.
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = j0 + n * kMmaN + 2 * t + e % 2;
          const bool valid =
              key < s_len && rows[e / 2] < l_len && attends(causal, rows[e / 2], key);
          s_acc[n][e] =
              valid ? s_acc[n][e] * scale + mask_term(mask, h, rows[e / 2], key) : -INFINITY;
          tile_max[e / 2] = fmaxf(tile_max[e / 2], s_acc[n][e]);
        }
      float correction[2], base[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        // The row's 32 keys are spread over the 4 lanes of a quad (t = 0..3).
        tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
        tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
        const float new_max = fmaxf(row_max[i], tile_max[i]);
        base[i] = new_max == -INFINITY ? 0.0f : new_max;  // a row that has seen no key yet
        correction[i] = expf(row_max[i] - base[i]);
        row_max[i] = new_max;
        row_sum[i] *= correction[i];
      }
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] *= correction[e / 2];
      // P, summed into this lane's part of l, and packed into A fragments for P V (dropped
      // there, with dropout): k step c takes S's n tiles 2c (a0, a1) and 2c + 1 (a2, a3).
      unsigned pa[kKeySteps][4];
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
        float p[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          p[e] = expf(s_acc[n][e] - base[e / 2]);  // 0 where masked
          row_sum[e / 2] += p[e];
          if constexpr (kDropout)
            if (p[e] != 0.0f)
              p[e] *= dropout.factor(h, rows[e / 2], j0 + n * kMmaN + 2 * t + e % 2);
        }
        pa[n / 2][n % 2 * 2] = pack2<T>(p[0], p[1]);
        pa[n / 2][n % 2 * 2 + 1] = pack2<T>(p[2], p[3]);
      }
      // O += P V. V's tile is [key][d]: B (key x d) row-major, transposed by ldmatrix.trans.
#pragma unroll
      for (int c = 0; c < kKeySteps; ++c)
#pragma unroll
        for (int n = 0; n < kOutTiles; n += 2) {
          unsigned r[4];
          const int key = c * kMmaK + lane % 16, col = n * kMmaN + lane / 16 * 8;
          ldmatrix_x4_trans(r, shared_address(&v_tile[key * kStride + col]));
          const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
          mma_m16n8k16<T>(acc[n], pa[c], b0);
          mma_m16n8k16<T>(acc[n + 1], pa[c], b1);
        }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      row_sum[i] += __shfl_xor_sync(0xffffffffu, row_sum[i], 1);
      row_sum[i] += __shfl_xor_sync(0xffffffffu, row_sum[i], 2);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (rows[i] >= l_len) continue;
      const float inverse = 1.0f / row_sum[i];
      float* out = o + (h * l_len + rows[i]) * kD;
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n)
        *reinterpret_cast<float2*>(&out[n * kMmaN + 2 * t]) =
            make_float2(acc[n][2 * i] * inverse, acc[n][2 * i + 1] * inverse);
      // No key seen (a mask removed all): 0 / 0 above, and lse NaN rather than -inf.
      if (t == 0)
        lse[h * l_len + rows[i]] = row_sum[i] == 0.0f ? NAN : row_max[i] + logf(row_sum[i]);
    }
  }
}

// Dropout is a template argument: its Philox rounds, unrolled over the tile's scores, would
// otherwise hold registers in every call (ptxas: 228 a thread at D = 128 against 165 without).
template <class T, int kD, bool kDropout>
void launch(const AttentionArgs& a) {
  KILN_LAUNCH(static_cast<unsigned>(blocks_for(v4_blocks(a.batch_heads, a.l), 1)), kV4Threads, 0,
              cuda::stream(), mma_fa2_kernel<T, kD, kDropout>)
  (static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.o, a.lse,
   a.batch_heads, static_cast<int>(a.l), static_cast<int>(a.s), a.scale, a.causal, a.mask,
   dropout_of(a.dropout, a.l, a.s));
  KILN_CUDA_CHECK_LAUNCH();
}

template <class T, bool kDropout>
void launch_for_head_dim(const AttentionArgs& a) {
  switch (a.d) {
    case 16:
      return launch<T, 16, kDropout>(a);
    case 32:
      return launch<T, 32, kDropout>(a);
    case 64:
      return launch<T, 64, kDropout>(a);
    default:
      return launch<T, 128, kDropout>(a);
  }
}

template <class T>
void launch_for_dropout(const AttentionArgs& a) {
  if (a.dropout.p > 0.0)
    launch_for_head_dim<T, true>(a);
  else
    launch_for_head_dim<T, false>(a);
}

// The instructions are Ampere's (gemm_tc/mma.cuh): an older GPU's code for them is a trap.
void check_device() {
  const int device = cuda::current_device();
  const cuda::DeviceProperties gpu = cuda::get_device_properties(device);
  if (gpu.major < 8)
    throw NotImplementedError(
        std::string("lab attention v4_mma_fa2: needs compute capability 8.0 or newer ") +
        "(ldmatrix, mma.sync.m16n8k16 in bf16 and f16: Ampere's instructions); cuda:" +
        std::to_string(device) + " (" + gpu.name + ") is " + std::to_string(gpu.major) + "." +
        std::to_string(gpu.minor) + ". v0_kiln_f32 runs there");
}

}  // namespace

void v4_mma_fa2(const AttentionArgs& a) {
  const std::string where = "lab attention v4_mma_fa2: ";
  check_shape("v4_mma_fa2", a.batch_heads, a.l, a.s, a.d);
  check_dropout("v4_mma_fa2", a.dropout);
  if (a.dtype != DType::bf16 && a.dtype != DType::f16)
    throw DTypeError(where + "the inputs must be bf16 or f16, got " + dtype_name(a.dtype));
  if (!v4_head_dim_supported(a.d))
    throw ShapeError(where + "the head dimension must be 16, 32, 64 or 128, got " +
                     std::to_string(a.d));
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  if (!aligned(a.q, 16) || !aligned(a.k, 16) || !aligned(a.v, 16) || !aligned(a.o, 8))
    throw ValueError(where + "Q, K and V must start on 16 bytes and O on 8");
  if (a.batch_heads == 0 || a.l == 0) return;
  check_device();
  if (a.dtype == DType::bf16)
    launch_for_dropout<__nv_bfloat16>(a);
  else
    launch_for_dropout<__half>(a);
}

}  // namespace kiln::lab::attention
