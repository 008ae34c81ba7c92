// Reduction v2: warp shuffles. v1's tree spends 10 barriers on 256 values; here each warp adds its
// 32 values in registers with a butterfly of __shfl_xor_sync (kiln's warp_allreduce in
// kernels/cuda/block_reduce.cuh: five steps, no shared memory, no barrier), and only the 8 warp
// totals go through shared memory, to be added by warp 0 the same way:
//
//   for (int mask = 16; mask > 0; mask >>= 1) v = v + shfl_xor(v, mask);   // warp_allreduce
//
// Why it should be faster: two barriers a block instead of ten, and no shared-memory traffic for
// 31 of every 32 values. The loads are still v1's (one element a thread), so on a large vector
// both are bound by the same number of loads in flight; the gain shows in the partials' passes.
//
// measured: not yet on a GPU.
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/lab/reduction/passes.h"
#include "kiln/kernels/cuda/lab/reduction/tiling.h"
#include "kiln/kernels/cuda/lab/reduction/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::reduction {

namespace {

__global__ void __launch_bounds__(kThreads)
    warp_shuffle_kernel(const float* x, float* out, int64_t rows, int64_t cols, int64_t chunk,
                        int64_t splits) {
  __shared__ cuda::RowReduceSmem<float> smem;
  for (int64_t block = blockIdx.x; block < rows * splits; block += gridDim.x) {
    const int64_t row = block / splits, i = (block % splits) * chunk + threadIdx.x;
    float v = i < cols ? x[row * cols + i] : 0.0f;
    v = cuda::row_allreduce(v, cuda::Sum{}, 0.0f, smem);
    if (threadIdx.x == 0) out[block] = v;
  }
}

}  // namespace

void v2_warp_shuffle(const ReductionArgs& args) {
  run_passes(args, chunked_passes(args.cols, kChunkV2),
             [&](const float* in, float* out, const Pass& pass) {
               KILN_LAUNCH(static_cast<unsigned>(pass_blocks(args.rows, pass)), kThreads, 0,
                           cuda::stream(), warp_shuffle_kernel)
               (in, out, args.rows, pass.cols, pass.chunk, pass.splits);
               KILN_CUDA_CHECK_LAUNCH();
             });
}

}  // namespace kiln::lab::reduction
