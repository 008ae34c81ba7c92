// Reduction v4: several elements a thread, a fixed grid. v1-v3 launch one block per chunk, so a
// thread has one load in flight and the block's combine is paid for every 256 or 1024 elements.
// Here the first pass launches about kTargetBlocks = 2048 blocks in all (a constant, about 16 a
// SM on a 132-SM H100 or H200, not read from the device; tiling.h:
// grid_stride_passes), each walking a long chunk of its row with kUnroll float4 loads issued
// before the first is added (thread_sum.cuh):
//
//   for (int u = 0; u < kUnroll; ++u) q[u] = *reinterpret_cast<const float4*>(src + i + u * 1024);
//   for (int u = 0; u < kUnroll; ++u) sum += (q[u].x + q[u].y) + (q[u].z + q[u].w);
//
// Why it should be faster: 64 bytes in flight a thread hide the latency of HBM with fewer warps,
// the combine is paid once per block instead of once per 1024 elements, and a vector takes two
// passes (2048 partials, then 1) instead of v3's three. The grid also loops over (row, split)
// pairs, so 65536 short rows are 2048 blocks of 32 rows each rather than 65536 blocks.
//
// measured: not yet on a GPU.
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/lab/reduction/passes.h"
#include "kiln/kernels/cuda/lab/reduction/thread_sum.cuh"
#include "kiln/kernels/cuda/lab/reduction/tiling.h"
#include "kiln/kernels/cuda/lab/reduction/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::reduction {

namespace {

template <bool kVector>
__global__ void __launch_bounds__(kThreads)
    grid_stride_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t rows,
                       int64_t cols, int64_t chunk, int64_t splits) {
  __shared__ cuda::RowReduceSmem<float> smem;
  for (int64_t block = blockIdx.x; block < rows * splits; block += gridDim.x) {
    const int64_t row = block / splits, begin = (block % splits) * chunk;
    float v =
        thread_sum<kVector>(x + row * cols, begin, begin + chunk < cols ? begin + chunk : cols);
    v = cuda::row_allreduce(v, cuda::Sum{}, 0.0f, smem);
    if (threadIdx.x == 0) out[block] = v;
  }
}

}  // namespace

void v4_grid_stride(const ReductionArgs& args) {
  run_passes(args, grid_stride_passes(args.rows, args.cols),
             [&](const float* in, float* out, const Pass& pass) {
               const unsigned blocks =
                   static_cast<unsigned>(pass_blocks(args.rows, pass, kTargetBlocks));
               if (vector_aligned(in, pass))
                 KILN_LAUNCH(blocks, kThreads, 0, cuda::stream(), grid_stride_kernel<true>)
               (in, out, args.rows, pass.cols, pass.chunk, pass.splits);
               else KILN_LAUNCH(blocks, kThreads, 0, cuda::stream(), grid_stride_kernel<false>)(
                   in, out, args.rows, pass.cols, pass.chunk, pass.splits);
               KILN_CUDA_CHECK_LAUNCH();
             });
}

}  // namespace kiln::lab::reduction
