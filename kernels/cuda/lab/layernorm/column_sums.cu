// layernorm/column_sums.h: dweight and dbias from the per-block partials.
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/lab/layernorm/column_sums.h"
#include "kiln/kernels/cuda/lab/layernorm/tiling.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::layernorm {

namespace {

// Consecutive threads take consecutive columns, so each step over the blocks reads a contiguous
// run of each partial.
__global__ void __launch_bounds__(kThreads)
    column_sums_kernel(const float* __restrict__ partial, int64_t blocks, int64_t cols,
                       float* __restrict__ dweight, float* __restrict__ dbias) {
  for (int64_t c = cuda::global_thread_index(); c < cols; c += cuda::grid_stride()) {
    float dw = 0.0f, db = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      dw += partial[b * cols + c];
      db += partial[(blocks + b) * cols + c];
    }
    dweight[c] = dw;
    dbias[c] = db;
  }
}

}  // namespace

void launch_column_sums(const float* partial, int64_t blocks, int64_t cols, float* dweight,
                        float* dbias) {
  KILN_LAUNCH(static_cast<unsigned>(column_blocks(cols)), kThreads, 0, cuda::stream(),
              column_sums_kernel)
  (partial, blocks, cols, dweight, dbias);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::layernorm
