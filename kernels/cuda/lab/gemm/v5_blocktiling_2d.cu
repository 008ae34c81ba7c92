// GEMM v5: 2D blocktiling. A thread now computes an 8 x 8 piece of C: for each step p along k it
// loads 8 values of A's column and 8 of B's row into registers and takes their outer product,
// 64 FMAs for 16 shared loads (v4: 8 for 9):
//
//   for (int i = 0; i < kT.tm; ++i) a_reg[i] = a_tile[(origin.row + i) * kT.bk + p];
//   for (int j = 0; j < kT.tn; ++j) b_reg[j] = b_tile[p * kT.bn + origin.col + j];
//   for (i, j) sum[i][j] += a_reg[i] * b_reg[j];
//
// The block's tile is 128 x 128 with 256 threads, so each element staged from global memory is
// used 128 times. What is left: the A reads are scalar and strided by bk (a_tile is [bm][bk]),
// the global loads are one float each, and both shared reads conflict. A warp's lanes hold 2 rows
// and 16 column groups of the tile (origin.col = (tid % 16) * 8), so each B load hits 16
// addresses in 4 banks, {0, 8, 16, 24} + j (4-way), and each A load 2 rows 64 floats apart, one
// bank (2-way): 48 wavefronts a step p where 16 would do, two thirds of them B's.
//
// measured: not yet on a GPU.
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/lab/gemm/problem.h"
#include "kiln/kernels/cuda/lab/gemm/tiling.h"
#include "kiln/kernels/cuda/lab/gemm/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::gemm {

namespace {

constexpr Tiling kT = kV5Blocktiling2d;
static_assert(valid(kT) && kT.wm == 0 && !kT.vector);

__global__ void __launch_bounds__(kT.threads)
    blocktiling_2d_kernel(int m, int n, int k, const float* __restrict__ a,
                          const float* __restrict__ b, float* __restrict__ c) {
  __shared__ float a_tile[kT.bm * kT.bk];  // [bm][bk]
  __shared__ float b_tile[kT.bk * kT.bn];  // [bk][bn]
  const int tid = threadIdx.x;
  const Origin origin = thread_origin<kT>(tid);
  const int block_row = blockIdx.y * kT.bm, block_col = blockIdx.x * kT.bn;
  float sum[kT.tm][kT.tn] = {};
  float a_reg[kT.tm], b_reg[kT.tn];
  for (int t = 0; t < k; t += kT.bk) {
#pragma unroll
    for (int i = tid; i < kT.bm * kT.bk; i += kT.threads) {
      const int r = block_row + i / kT.bk, p = t + i % kT.bk;
      a_tile[i] = r < m && p < k ? a[int64_t{r} * k + p] : 0.0f;
    }
#pragma unroll
    for (int i = tid; i < kT.bk * kT.bn; i += kT.threads) {
      const int p = t + i / kT.bn, col = block_col + i % kT.bn;
      b_tile[i] = p < k && col < n ? b[int64_t{p} * n + col] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kT.bk; ++p) {
#pragma unroll
      for (int i = 0; i < kT.tm; ++i) a_reg[i] = a_tile[(origin.row + i) * kT.bk + p];
#pragma unroll
      for (int j = 0; j < kT.tn; ++j) b_reg[j] = b_tile[p * kT.bn + origin.col + j];
#pragma unroll
      for (int i = 0; i < kT.tm; ++i)
#pragma unroll
        for (int j = 0; j < kT.tn; ++j) sum[i][j] += a_reg[i] * b_reg[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kT.tm; ++i) {
    const int row = block_row + origin.row + i;
#pragma unroll
    for (int j = 0; j < kT.tn; ++j) {
      const int col = block_col + origin.col + j;
      if (row < m && col < n) c[int64_t{row} * n + col] = sum[i][j];
    }
  }
}

}  // namespace

void v5_blocktiling_2d(const GemmArgs& args) {
  const Grid g = grid(kT, args.m, args.n);
  check_problem("v5_blocktiling_2d", args.m, args.n, args.k, g);
  if (args.m == 0 || args.n == 0) return;
  KILN_LAUNCH(dim3(g.x, g.y), kT.threads, 0, cuda::stream(), blocktiling_2d_kernel)
  (static_cast<int>(args.m), static_cast<int>(args.n), static_cast<int>(args.k), args.a, args.b,
   args.c);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::gemm
