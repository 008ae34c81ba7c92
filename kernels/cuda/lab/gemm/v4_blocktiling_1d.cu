// GEMM v4: 1D blocktiling. v3 spends two shared-memory loads on each FMA. Here a thread computes
// tm = 8 elements of one column of C: for each step p along k it loads B's value once into a
// register and reuses it for all 8 rows, so a step is 9 shared loads for 8 FMAs:
//
//   const float b_value = b_tile[p * kT.bn + origin.col];
//   for (int r = 0; r < kT.tm; ++r) sum[r] += a_tile[(origin.row + r) * kT.bk + p] * b_value;
//
// The block's tile grows to 64 x 64 (with bk = 8, so 512 threads each load one element of A's
// tile and one of B's), which also halves the global traffic per FMA against v3's 32 x 32.
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

constexpr Tiling kT = kV4Blocktiling1d;
static_assert(valid(kT) && kT.tn == 1 && kT.wm == 0 && !kT.vector);

__global__ void __launch_bounds__(kT.threads)
    blocktiling_1d_kernel(int m, int n, int k, const float* __restrict__ a,
                          const float* __restrict__ b, float* __restrict__ c) {
  __shared__ float a_tile[kT.bm * kT.bk];  // [bm][bk]
  __shared__ float b_tile[kT.bk * kT.bn];  // [bk][bn]
  const int tid = threadIdx.x;
  const Origin origin = thread_origin<kT>(tid);  // rows origin.row + r, column origin.col
  const int block_row = blockIdx.y * kT.bm, block_col = blockIdx.x * kT.bn;
  float sum[kT.tm] = {};
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
      const float b_value = b_tile[p * kT.bn + origin.col];
#pragma unroll
      for (int r = 0; r < kT.tm; ++r) sum[r] += a_tile[(origin.row + r) * kT.bk + p] * b_value;
    }
    __syncthreads();
  }
  const int col = block_col + origin.col;
#pragma unroll
  for (int r = 0; r < kT.tm; ++r) {
    const int row = block_row + origin.row + r;
    if (row < m && col < n) c[int64_t{row} * n + col] = sum[r];
  }
}

}  // namespace

void v4_blocktiling_1d(const GemmArgs& args) {
  const Grid g = grid(kT, args.m, args.n);
  check_problem("v4_blocktiling_1d", args.m, args.n, args.k, g);
  if (args.m == 0 || args.n == 0) return;
  KILN_LAUNCH(dim3(g.x, g.y), kT.threads, 0, cuda::stream(), blocktiling_1d_kernel)
  (static_cast<int>(args.m), static_cast<int>(args.n), static_cast<int>(args.k), args.a, args.b,
   args.c);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::gemm
