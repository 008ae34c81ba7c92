// What v1 and v2 share (v1_mma_ldmatrix.cu explains it): a warp's products of one staged bk step
// with ldmatrix and mma.sync, and the store of its f32 accumulators.
#pragma once

#include <cstdint>

#include "kiln/kernels/cuda/lab/gemm_tc/mma.cuh"
#include "kiln/kernels/cuda/lab/gemm_tc/tiling.h"

namespace kiln::lab::gemm_tc {

template <TcTiling kT, class T>
struct WarpMma {
  static_assert(valid(kT));
  static constexpr int kTilesM = mma_tiles_m(kT);
  static constexpr int kTilesN = mma_tiles_n(kT);
  static constexpr int kAStride = a_stride(kT);
  static constexpr int kBStride = b_stride(kT);
  static constexpr int kWarpM = warp_m(kT);
  static constexpr int kWarpN = warp_n(kT);

  float acc[kTilesM][kTilesN][4] = {};
  int warp_row0 = 0;  // the warp's first row and column in the block's tile
  int warp_col0 = 0;

  __device__ __forceinline__ WarpMma() {
    const int warp = threadIdx.x / kWarpSize;
    warp_row0 = warp / kT.warps_n * kWarpM;
    warp_col0 = warp % kT.warps_n * kWarpN;
  }

  // a_tile [bm][a_stride], b_tile [bk][b_stride], in shared memory.
  __device__ __forceinline__ void multiply(const T* a_tile, const T* b_tile) {
    const int lane = threadIdx.x % kWarpSize;
#pragma unroll
    for (int kk = 0; kk < kT.bk; kk += kMmaK) {
      unsigned a[kTilesM][4], b[kTilesN][2];
      // A: lanes 0-15 address rows 0-15 at column kk, lanes 16-31 the same rows at kk + 8: the
      // four 8 x 8 matrices come back as the fragment's a0..a3.
#pragma unroll
      for (int i = 0; i < kTilesM; ++i) {
        const int row = warp_row0 + i * kMmaM + lane % 16, col = kk + lane / 16 * 8;
        ldmatrix_x4(a[i], shared_address(&a_tile[row * kAStride + col]));
      }
      // B: rows k of the stored [k][n] tile, transposed on the way: lanes 0-15 address k rows
      // kk..kk+15 at column n0, lanes 16-31 the same at n0 + 8, which gives two n8 tiles.
#pragma unroll
      for (int j = 0; j < kTilesN; j += 2) {
        unsigned r[4];
        const int row = kk + lane % 16, col = warp_col0 + j * kMmaN + lane / 16 * 8;
        ldmatrix_x4_trans(r, shared_address(&b_tile[row * kBStride + col]));
        b[j][0] = r[0], b[j][1] = r[1], b[j + 1][0] = r[2], b[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < kTilesM; ++i)
#pragma unroll
        for (int j = 0; j < kTilesN; ++j) mma_m16n8k16<T>(acc[i][j], a[i], b[j]);
    }
  }

  // Each lane holds rows g and g + 8, columns 2t and 2t + 1, of each 16 x 8 tile: two float2
  // stores (n is a multiple of 8, so a pair is inside the row or outside it).
  __device__ __forceinline__ void store(float* __restrict__ c, int m, int n, int block_row,
                                        int block_col) const {
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
#pragma unroll
    for (int i = 0; i < kTilesM; ++i)
#pragma unroll
      for (int j = 0; j < kTilesN; ++j) {
        const Position first = accumulator_position<kT>(warp, lane, i, j, 0);  // r = 2: row + 8
        const int row = block_row + first.row;
        const int col = block_col + first.col;
        if (col >= n) continue;
        if (row < m)
          *reinterpret_cast<float2*>(&c[int64_t{row} * n + col]) =
              make_float2(acc[i][j][0], acc[i][j][1]);
        if (row + 8 < m)
          *reinterpret_cast<float2*>(&c[int64_t{row + 8} * n + col]) =
              make_float2(acc[i][j][2], acc[i][j][3]);
      }
  }
};

}  // namespace kiln::lab::gemm_tc
