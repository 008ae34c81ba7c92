// GEMM v2: global-memory coalescing. v1's warp took 32 rows of C in one column; here it takes 32
// columns of one row, by swapping which thread index walks which dimension:
//
//   const int row = blockIdx.y * 32 + threadIdx.y;
//   const int col = blockIdx.x * 32 + threadIdx.x;   // consecutive threads: consecutive COLUMNS
//
// Now each step's load of B is 32 consecutive floats (one 128-byte line), A's value is one
// address broadcast to the warp, and the store of C is one line. The arithmetic is v1's to the
// instruction; only the addresses a warp touches together changed. (siboehm measured this step
// alone at about 6x on an A6000.)
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

constexpr Tiling kT = kV2Coalesced;
static_assert(valid(kT));

__global__ void __launch_bounds__(kT.threads)
    coalesced_kernel(int m, int n, int k, const float* __restrict__ a, const float* __restrict__ b,
                     float* __restrict__ c) {
  const int row = blockIdx.y * kT.bm + threadIdx.y;
  const int col = blockIdx.x * kT.bn + threadIdx.x;
  if (row >= m || col >= n) return;
  const float* a_row = a + int64_t{row} * k;
  float sum = 0.0f;
  for (int p = 0; p < k; ++p) sum += a_row[p] * b[int64_t{p} * n + col];
  c[int64_t{row} * n + col] = sum;
}

}  // namespace

void v2_coalesced(const GemmArgs& args) {
  const Grid g = grid(kT, args.m, args.n);
  check_problem("v2_coalesced", args.m, args.n, args.k, g);
  if (args.m == 0 || args.n == 0) return;
  KILN_LAUNCH(dim3(g.x, g.y), dim3(kT.bn, kT.bm), 0, cuda::stream(), coalesced_kernel)
  (static_cast<int>(args.m), static_cast<int>(args.n), static_cast<int>(args.k), args.a, args.b,
   args.c);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::gemm
