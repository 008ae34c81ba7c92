// The warp tiling of v7 and v8 (v7_warptiling.cu explains it): which elements of the block's tile
// each thread computes, the products of one staged bk step, and the store of the results.
//
// The block's tile is split among its warps, wm x wn each; a warp walks its piece in
// wm_iter x wn_iter sub-tiles of wsub_m x wsub_n, and within a sub-tile each lane owns tm x tn
// elements, the lanes laid out (wsub_m / tm) x (wsub_n / tn).
#pragma once

#include <cstdint>

#include "kiln/kernels/cuda/lab/gemm/tile_loader.cuh"
#include "kiln/kernels/cuda/lab/gemm/tiling.h"

namespace kiln::lab::gemm {

template <Tiling kT>
struct WarpTile {
  static_assert(valid(kT) && kT.wm > 0 && kT.vector);
  static constexpr int kWmIter = wm_iter(kT);
  static constexpr int kWsubM = wsub_m(kT);
  static constexpr int kWsubN = wsub_n(kT);
  static constexpr int kRows = kWmIter * kT.tm;     // a thread's rows, all sub-tiles
  static constexpr int kCols = kT.wn_iter * kT.tn;  // and columns

  float sum[kRows][kCols] = {};
  int row0 = 0;  // the thread's first row and column within the block's tile
  int col0 = 0;

  __device__ __forceinline__ WarpTile() {
    const Origin origin = thread_origin<kT>(threadIdx.x);
    row0 = origin.row;
    col0 = origin.col;
  }

  // The products of one bk step: a_tile [bk][bm] (transposed), b_tile [bk][bn].
  __device__ __forceinline__ void multiply(const float* a_tile, const float* b_tile) {
    float a_reg[kRows], b_reg[kCols];
#pragma unroll
    for (int p = 0; p < kT.bk; ++p) {
#pragma unroll
      for (int wi = 0; wi < kWmIter; ++wi)
#pragma unroll
        for (int i = 0; i < kT.tm; i += 4)
          read4(&a_tile[p * kT.bm + row0 + wi * kWsubM + i], a_reg, wi * kT.tm + i);
#pragma unroll
      for (int wj = 0; wj < kT.wn_iter; ++wj)
#pragma unroll
        for (int j = 0; j < kT.tn; j += 4)
          read4(&b_tile[p * kT.bn + col0 + wj * kWsubN + j], b_reg, wj * kT.tn + j);
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int j = 0; j < kCols; ++j) sum[i][j] += a_reg[i] * b_reg[j];
    }
  }

  template <bool kVector>
  __device__ __forceinline__ void store(float* __restrict__ c, int m, int n, int block_row,
                                        int block_col) const {
#pragma unroll
    for (int wi = 0; wi < kWmIter; ++wi)
#pragma unroll
      for (int i = 0; i < kT.tm; ++i) {
        const int row = block_row + row0 + wi * kWsubM + i;
        if (row >= m) continue;
#pragma unroll
        for (int wj = 0; wj < kT.wn_iter; ++wj)
#pragma unroll
          for (int j = 0; j < kT.tn; j += 4) {
            const int col = block_col + col0 + wj * kWsubN + j;
            const float* s = &sum[wi * kT.tm + i][wj * kT.tn + j];
            const float v[4] = {s[0], s[1], s[2], s[3]};
            store4<kVector>(c, int64_t{row} * n + col, n - col, v);
          }
      }
  }
};

}  // namespace kiln::lab::gemm
