// Softmax v3: a warp per row. v2's block of 256 threads needs shared memory and barriers to
// combine its warps' states; a warp alone combines with five shuffles (kiln's warp_allreduce), so
// a row never waits for another warp, and a block holds 8 independent rows:
//
//   state = cuda::warp_allreduce(state, CombineMaxSum{});   // every lane gets the row's state
//
// Why it should be faster: no barrier at all, and 8 rows in flight a block instead of 1, so a
// slow row does not stall the others; for rows of a few thousand elements each lane walks a
// hundred or so, enough loads in flight. Past ~10k elements a row, one warp is too few threads
// for one row and the block-per-row versions win again.
//
// measured: not yet on a GPU.
#include <cmath>
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/lab/softmax/online.h"
#include "kiln/kernels/cuda/lab/softmax/tiling.h"
#include "kiln/kernels/cuda/lab/softmax/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::softmax {

namespace {

__global__ void __launch_bounds__(kWarpRowThreads)
    warp_per_row_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                        int64_t cols) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t first = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarpSize;
  for (int64_t row = first; row < rows; row += int64_t{gridDim.x} * kWarpsPerBlock) {
    const float* in = x + row * cols;
    float* out = y + row * cols;
    MaxSum state = empty_max_sum();
    for (int64_t c = lane; c < cols; c += kWarpSize) online_update(state, in[c]);
    state = cuda::warp_allreduce(state, CombineMaxSum{});
    const float scale = 1.0f / state.sum;
    for (int64_t c = lane; c < cols; c += kWarpSize) out[c] = expf(in[c] - state.max) * scale;
  }
}

}  // namespace

void v3_warp_per_row(const SoftmaxArgs& args) {
  if (args.rows == 0 || args.cols == 0) return;
  KILN_LAUNCH(static_cast<unsigned>(v3_blocks(args.rows)), kWarpRowThreads, 0, cuda::stream(),
              warp_per_row_kernel)
  (args.x, args.y, args.rows, args.cols);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::softmax
