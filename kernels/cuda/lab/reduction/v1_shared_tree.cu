// Reduction v1: a tree in shared memory. Each thread loads one element, the block halves the
// number of live values at each of log2(256) = 8 levels, with a barrier after each level, and
// thread 0 writes the block's partial: 10 barriers a block, with the one after the loads and the
// one before partial[] is reused. A 2^28-element vector takes four passes (2^20, 2^12, 16,
// 1 partials).
//
// Why it is the starting point: the loads are coalesced (consecutive threads, consecutive
// elements), and the tree uses "sequential addressing": at each level the live threads are the
// first `stride` of the block, reading partial[tid + stride], so whole warps retire together and
// the reads of a warp hit 32 distinct banks. What it wastes: one element a thread means one load
// in flight a thread, and half the block is idle from the first level on, while it waits at 10
// barriers.
//
// measured: not yet on a GPU.
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/lab/reduction/passes.h"
#include "kiln/kernels/cuda/lab/reduction/tiling.h"
#include "kiln/kernels/cuda/lab/reduction/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::reduction {

namespace {

__global__ void __launch_bounds__(kThreads)
    shared_tree_kernel(const float* x, float* out, int64_t rows, int64_t cols, int64_t chunk,
                       int64_t splits) {
  __shared__ float partial[kThreads];
  const int tid = threadIdx.x;
  for (int64_t block = blockIdx.x; block < rows * splits; block += gridDim.x) {
    const int64_t row = block / splits, begin = (block % splits) * chunk + tid;
    partial[tid] = begin < cols ? x[row * cols + begin] : 0.0f;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
      if (tid < stride) partial[tid] += partial[tid + stride];
      __syncthreads();
    }
    if (tid == 0) out[block] = partial[0];
    __syncthreads();  // thread 0 has read partial[0] before the next block overwrites it
  }
}

}  // namespace

void v1_shared_tree(const ReductionArgs& args) {
  run_passes(args, chunked_passes(args.cols, kChunkV1),
             [&](const float* in, float* out, const Pass& pass) {
               KILN_LAUNCH(static_cast<unsigned>(pass_blocks(args.rows, pass)), kThreads, 0,
                           cuda::stream(), shared_tree_kernel)
               (in, out, args.rows, pass.cols, pass.chunk, pass.splits);
               KILN_CUDA_CHECK_LAUNCH();
             });
}

}  // namespace kiln::lab::reduction
