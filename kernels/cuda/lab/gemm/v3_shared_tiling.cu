// GEMM v3: shared-memory tiling. v2 reads every element of A and B from global memory once per
// use: k times per element of C. Here a block of 32 x 32 threads stages a 32 x 32 tile of A and
// one of B in shared memory, one element a thread, and every thread then takes its 32 products
// for that step of k from shared memory:
//
//   a_tile[ty][tx] = A[row][t + tx];   b_tile[ty][tx] = B[t + ty][col];   __syncthreads();
//   for (int p = 0; p < 32; ++p) sum += a_tile[ty][p] * b_tile[p][tx];   __syncthreads();
//
// Why it should be faster: each element loaded from global memory now serves 32 threads, so the
// global traffic falls 32-fold, and b_tile[p][tx] is conflict-free (a warp reads one row) while
// a_tile[ty][p] is a broadcast. What is left: two shared loads for every FMA. Shared memory
// delivers 128 bytes a clock an SM, one 32-bit warp load (a broadcast takes a whole one too), so
// the FMAs are capped at one warp instruction every two clocks, against the 4 an SM can issue on
// sm_86-sm_90 (2 on sm_80): 1/8 of an H100's FP32 peak (1/4 of an A100's) before anything else.
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

constexpr Tiling kT = kV3SharedTiling;
static_assert(valid(kT) && kT.bm == kT.bk && kT.bn == kT.bk && kT.bm * kT.bn == kT.threads);
constexpr int kTile = kT.bk;

__global__ void __launch_bounds__(kT.threads)
    shared_tiling_kernel(int m, int n, int k, const float* __restrict__ a,
                         const float* __restrict__ b, float* __restrict__ c) {
  __shared__ float a_tile[kTile][kTile];
  __shared__ float b_tile[kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty;
  const int col = blockIdx.x * kTile + tx;
  float sum = 0.0f;
  for (int t = 0; t < k; t += kTile) {
    // Past an edge of A or B the tile holds zeros, which add nothing to the sums.
    a_tile[ty][tx] = row < m && t + tx < k ? a[int64_t{row} * k + t + tx] : 0.0f;
    b_tile[ty][tx] = t + ty < k && col < n ? b[int64_t{t + ty} * n + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kTile; ++p) sum += a_tile[ty][p] * b_tile[p][tx];
    __syncthreads();
  }
  if (row < m && col < n) c[int64_t{row} * n + col] = sum;
}

}  // namespace

void v3_shared_tiling(const GemmArgs& args) {
  const Grid g = grid(kT, args.m, args.n);
  check_problem("v3_shared_tiling", args.m, args.n, args.k, g);
  if (args.m == 0 || args.n == 0) return;
  KILN_LAUNCH(dim3(g.x, g.y), dim3(kTile, kTile), 0, cuda::stream(), shared_tiling_kernel)
  (static_cast<int>(args.m), static_cast<int>(args.n), static_cast<int>(args.k), args.a, args.b,
   args.c);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::gemm
