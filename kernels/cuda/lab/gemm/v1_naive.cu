// GEMM v1: naive. A thread per element of C, each walking its row of A and its column of B
// straight from global memory:
//
//   const int row = blockIdx.x * 32 + threadIdx.x;   // consecutive threads: consecutive ROWS
//   const int col = blockIdx.y * 32 + threadIdx.y;
//   for (int p = 0; p < k; ++p) sum += a[row * k + p] * b[p * n + col];
//
// What it costs: the 32 threads of a warp share col and take 32 different rows, so each step's
// load of A touches 32 lines a row apart (4 bytes used of each 32-byte sector), B's load is one
// value broadcast, and the store of C is 32 scattered writes. Nothing is reused from a fast
// memory but what the caches catch by luck. It is the floor the other versions climb from.
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

constexpr Tiling kT = kV1Naive;
static_assert(valid(kT));

__global__ void __launch_bounds__(kT.threads)
    naive_kernel(int m, int n, int k, const float* __restrict__ a, const float* __restrict__ b,
                 float* __restrict__ c) {
  const int row = blockIdx.x * kT.bm + threadIdx.x;
  const int col = blockIdx.y * kT.bn + threadIdx.y;
  if (row >= m || col >= n) return;
  const float* a_row = a + int64_t{row} * k;
  float sum = 0.0f;
  for (int p = 0; p < k; ++p) sum += a_row[p] * b[int64_t{p} * n + col];
  c[int64_t{row} * n + col] = sum;
}

}  // namespace

void v1_naive(const GemmArgs& args) {
  const Grid g = v1_grid(args.m, args.n);
  check_problem("v1_naive", args.m, args.n, args.k, g);
  if (args.m == 0 || args.n == 0) return;
  KILN_LAUNCH(dim3(g.x, g.y), dim3(kT.bm, kT.bn), 0, cuda::stream(), naive_kernel)
  (static_cast<int>(args.m), static_cast<int>(args.n), static_cast<int>(args.k), args.a, args.b,
   args.c);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::gemm
