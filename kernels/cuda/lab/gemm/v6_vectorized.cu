// GEMM v6: vectorised loads, A's tile transposed. v5 loads global memory one float at a time and
// reads A's tile down a column ([bm][bk], a stride of bk floats). Here every global load is a
// float4 (tile_loader.cuh), and A's tile is stored transposed, [bk][bm], so that the 8 values of
// A a thread needs at step p are consecutive and come in two float4 shared loads, as B's do:
//
//   for (int j = 0; j < 4; ++j) a_tile[(p + j) * kT.bm + row] = a[l][j];      // commit: transpose
//   a_reg = float4s of a_tile[p * kT.bm + origin.row ..]               // 2 x LDS.128
//   b_reg = float4s of b_tile[p * kT.bn + origin.col ..]               // 2 x LDS.128
//
// Why it should be faster: a quarter of the global load instructions, and 4 shared loads per
// 64 FMAs instead of 16; the results are stored as float4s too. A problem whose n or k is not a
// multiple of 4 takes the same kernel with scalar loads.
//
// measured: not yet on a GPU.
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/lab/gemm/problem.h"
#include "kiln/kernels/cuda/lab/gemm/tile_loader.cuh"
#include "kiln/kernels/cuda/lab/gemm/tiling.h"
#include "kiln/kernels/cuda/lab/gemm/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::gemm {

namespace {

constexpr Tiling kT = kV6Vectorized;
static_assert(valid(kT) && kT.wm == 0 && kT.tm % 4 == 0 && kT.tn % 4 == 0);

template <bool kVector>
__global__ void __launch_bounds__(kT.threads)
    vectorized_kernel(int m, int n, int k, const float* __restrict__ a, const float* __restrict__ b,
                      float* __restrict__ c) {
  __shared__ __align__(16) float a_tile[kT.bk * kT.bm];  // [bk][bm]: A's tile transposed
  __shared__ __align__(16) float b_tile[kT.bk * kT.bn];  // [bk][bn]
  const Origin origin = thread_origin<kT>(threadIdx.x);
  const int block_row = blockIdx.y * kT.bm, block_col = blockIdx.x * kT.bn;
  TileLoader<kT, kVector> loader;
  float sum[kT.tm][kT.tn] = {};
  float a_reg[kT.tm], b_reg[kT.tn];
  for (int t = 0; t < k; t += kT.bk) {
    loader.fetch(a, b, m, n, k, block_row, block_col, t);
    loader.commit(a_tile, b_tile);
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kT.bk; ++p) {
#pragma unroll
      for (int i = 0; i < kT.tm; i += 4) read4(&a_tile[p * kT.bm + origin.row + i], a_reg, i);
#pragma unroll
      for (int j = 0; j < kT.tn; j += 4) read4(&b_tile[p * kT.bn + origin.col + j], b_reg, j);
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
    if (row >= m) continue;
#pragma unroll
    for (int j = 0; j < kT.tn; j += 4) {
      const int col = block_col + origin.col + j;
      const float v[4] = {sum[i][j], sum[i][j + 1], sum[i][j + 2], sum[i][j + 3]};
      store4<kVector>(c, int64_t{row} * n + col, n - col, v);
    }
  }
}

}  // namespace

void v6_vectorized(const GemmArgs& args) {
  const Grid g = grid(kT, args.m, args.n);
  check_problem("v6_vectorized", args.m, args.n, args.k, g);
  if (args.m == 0 || args.n == 0) return;
  const int m = static_cast<int>(args.m), n = static_cast<int>(args.n),
            k = static_cast<int>(args.k);
  if (vector_aligned(args.a, args.b, args.c, args.n, args.k))
    KILN_LAUNCH(dim3(g.x, g.y), kT.threads, 0, cuda::stream(), vectorized_kernel<true>)
  (m, n, k, args.a, args.b, args.c);
  else KILN_LAUNCH(dim3(g.x, g.y), kT.threads, 0, cuda::stream(), vectorized_kernel<false>)(
      m, n, k, args.a, args.b, args.c);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::gemm
