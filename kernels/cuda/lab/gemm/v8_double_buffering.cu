// GEMM v8: double buffering. In v7 a block loads a tile, waits, multiplies, waits, and only then
// starts the next tile's loads: while the loads are in flight no FMA issues (unless other blocks
// on the SM fill the gap, and at 128 accumulators a thread there are few). Here there are two
// copies of the tiles in shared memory: the next tile's global loads are issued into registers
// before the current tile's products, and committed to the other copy after them, so the loads'
// latency hides behind 16 steps of FMAs, and one barrier a tile suffices:
//
//   loader.fetch(.., t + kT.bk);               // global -> registers, in flight during ...
//   tile.multiply(a_tile[stage], b_tile[stage]);
//   loader.commit(a_tile[stage ^ 1], b_tile[stage ^ 1]);
//   __syncthreads();  stage ^= 1;
//
// The barrier is enough: a copy is written at step t only after this thread's products of step
// t - 1 read it, and every other thread finished those before the barrier that ended step t - 1.
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

constexpr Tiling kT = kV8DoubleBuffering;
static_assert(valid(kT) && kT.stages == 2);

template <bool kVector>
__global__ void __launch_bounds__(kT.threads)
    double_buffering_kernel(int m, int n, int k, const float* __restrict__ a,
                            const float* __restrict__ b, float* __restrict__ c) {
  __shared__ __align__(16) float a_tile[2][kT.bk * kT.bm];  // [stage][bk][bm]
  __shared__ __align__(16) float b_tile[2][kT.bk * kT.bn];  // [stage][bk][bn]
  const int block_row = blockIdx.y * kT.bm, block_col = blockIdx.x * kT.bn;
  TileLoader<kT, kVector> loader;
  WarpTile<kT> tile;
  loader.fetch(a, b, m, n, k, block_row, block_col, 0);
  loader.commit(a_tile[0], b_tile[0]);
  __syncthreads();
  int stage = 0;
  for (int t = 0; t < k; t += kT.bk) {
    const bool more = t + kT.bk < k;
    if (more) loader.fetch(a, b, m, n, k, block_row, block_col, t + kT.bk);
    tile.multiply(a_tile[stage], b_tile[stage]);
    if (more) loader.commit(a_tile[stage ^ 1], b_tile[stage ^ 1]);
    __syncthreads();
    stage ^= 1;
  }
  tile.template store<kVector>(c, m, n, block_row, block_col);
}

}  // namespace

void v8_double_buffering(const GemmArgs& args) {
  const Grid g = grid(kT, args.m, args.n);
  check_problem("v8_double_buffering", args.m, args.n, args.k, g);
  if (args.m == 0 || args.n == 0) return;
  const int m = static_cast<int>(args.m), n = static_cast<int>(args.n),
            k = static_cast<int>(args.k);
  if (vector_aligned(args.a, args.b, args.c, args.n, args.k))
    KILN_LAUNCH(dim3(g.x, g.y), kT.threads, 0, cuda::stream(), double_buffering_kernel<true>)
  (m, n, k, args.a, args.b, args.c);
  else KILN_LAUNCH(dim3(g.x, g.y), kT.threads, 0, cuda::stream(), double_buffering_kernel<false>)(
      m, n, k, args.a, args.b, args.c);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::gemm
