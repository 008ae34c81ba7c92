// GEMM v7: warptiling. In v6 the 256 threads of a block each own an 8 x 8 square of the 128 x 128
// tile, laid out row by row, so the 32 lanes of a warp read A and B values spread over the whole
// tile. Here the tile is split among 4 warps, 64 x 64 each (warp_tile.cuh), and a warp walks its
// piece in 4 sub-tiles of 64 x 16 along n, each lane owning 8 x 4 of every sub-tile:
//
//   row0 = warp_row * kT.wm + lane_row * kT.tm;   col0 = warp_col * kT.wn + lane_col * kT.tn;
//   a_reg <- a_tile[p][row0 + i], i < 8;   b_reg <- b_tile[p][col0 + wj * 16 + j], wj < 4, j < 4
//   sum[i][wj * 4 + j] += a_reg[i] * b_reg[wj * 4 + j]     (128 accumulators a thread)
//
// Why it should be faster: the shared reads of a warp land in a small region (each read4 of A
// touches 8 distinct float4s and each of B 4, broadcast to the other lanes; a step p is 2 reads of
// A and 4 of B, 16 distinct float4s of each), the warp's working set matches the
// hierarchy (block tile in shared memory, warp tile in the register file of one SM sub-partition,
// thread tile in registers), and bk = 16 halves the barriers per FMA. 128 threads with 128
// accumulators each keep the FMA pipes fed with fewer warps.
//
// measured: not yet on a GPU.
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/lab/gemm/problem.h"
#include "kiln/kernels/cuda/lab/gemm/tile_loader.cuh"
#include "kiln/kernels/cuda/lab/gemm/tiling.h"
#include "kiln/kernels/cuda/lab/gemm/versions.h"
#include "kiln/kernels/cuda/lab/gemm/warp_tile.cuh"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::gemm {

namespace {

constexpr Tiling kT = kV7Warptiling;
static_assert(valid(kT) && kT.stages == 1);

template <bool kVector>
__global__ void __launch_bounds__(kT.threads)
    warptiling_kernel(int m, int n, int k, const float* __restrict__ a, const float* __restrict__ b,
                      float* __restrict__ c) {
  __shared__ __align__(16) float a_tile[kT.bk * kT.bm];  // [bk][bm]: A's tile transposed
  __shared__ __align__(16) float b_tile[kT.bk * kT.bn];  // [bk][bn]
  const int block_row = blockIdx.y * kT.bm, block_col = blockIdx.x * kT.bn;
  TileLoader<kT, kVector> loader;
  WarpTile<kT> tile;
  for (int t = 0; t < k; t += kT.bk) {
    loader.fetch(a, b, m, n, k, block_row, block_col, t);
    loader.commit(a_tile, b_tile);
    __syncthreads();
    tile.multiply(a_tile, b_tile);
    __syncthreads();
  }
  tile.template store<kVector>(c, m, n, block_row, block_col);
}

}  // namespace

void v7_warptiling(const GemmArgs& args) {
  const Grid g = grid(kT, args.m, args.n);
  check_problem("v7_warptiling", args.m, args.n, args.k, g);
  if (args.m == 0 || args.n == 0) return;
  const int m = static_cast<int>(args.m), n = static_cast<int>(args.n),
            k = static_cast<int>(args.k);
  if (vector_aligned(args.a, args.b, args.c, args.n, args.k))
    KILN_LAUNCH(dim3(g.x, g.y), kT.threads, 0, cuda::stream(), warptiling_kernel<true>)
  (m, n, k, args.a, args.b, args.c);
  else KILN_LAUNCH(dim3(g.x, g.y), kT.threads, 0, cuda::stream(), warptiling_kernel<false>)(
      m, n, k, args.a, args.b, args.c);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::gemm
