// Layer norm v2: a warp per row. The lanes of a warp walk the row together, lane l taking
// elements l, l + 32, ..., so each of the warp's loads is one 128-byte line (v1 used 4 bytes of
// 32 lines), and the row's sums combine in five shuffles (kiln's warp_allreduce), no barrier:
//
//   for (c = lane; c < cols; c += 32) sum += in[c];
//   const float mu = cuda::warp_allreduce(sum, cuda::Sum{}) / cols;
//
// The backward's dx is the same walk. dweight and dbias are sums down the columns, across rows
// that different warps own: each block takes kRowsPerBlock consecutive rows, and after their dx
// its threads walk the block's rows column by column (coalesced again) into one partial per block
// and column; column_sums.cu adds the partials. The second walk re-reads x and dy, and at the
// lab's sizes from DRAM, not L2: a block's rows are 64 x cols x 8 bytes (2 MiB at 4096 columns),
// and with the ~800 blocks resident at once on 132 SMs (6 an SM: 40 registers a thread, ptxas
// for sm_90) about 1.6 GiB is read between a block's first walk and its second (0.4 GiB at
// 262144 x 1024), against an L2 of 50 MB. So the backward moves about 20 bytes an element, not
// the 12 it must; v3 has no second walk.
//
// Why it should be faster: every load is coalesced and 8 rows run a block, so the forward reads
// the row three times at full width (sum, squares, write) instead of at an eighth of it.
//
// measured: not yet on a GPU.
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/lab/layernorm/column_sums.h"
#include "kiln/kernels/cuda/lab/layernorm/tiling.h"
#include "kiln/kernels/cuda/lab/layernorm/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::layernorm {

namespace {

constexpr int kBlockThreads = kWarpsPerBlock * kWarpSize;

__global__ void __launch_bounds__(kBlockThreads)
    warp_forward_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                        const float* __restrict__ bias, float eps, float* __restrict__ y,
                        float* __restrict__ mean, float* __restrict__ rstd, int64_t rows,
                        int64_t cols) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t step = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarpSize; row < rows;
       row += step) {
    const float* in = x + row * cols;
    float* out = y + row * cols;
    float sum = 0.0f;
    for (int64_t c = lane; c < cols; c += kWarpSize) sum += in[c];
    const float mu = cuda::warp_allreduce(sum, cuda::Sum{}) / static_cast<float>(cols);
    float squares = 0.0f;
    for (int64_t c = lane; c < cols; c += kWarpSize) squares += (in[c] - mu) * (in[c] - mu);
    const float inv =
        rsqrtf(cuda::warp_allreduce(squares, cuda::Sum{}) / static_cast<float>(cols) + eps);
    for (int64_t c = lane; c < cols; c += kWarpSize)
      out[c] = (in[c] - mu) * inv * weight[c] + bias[c];
    if (lane == 0) {
      mean[row] = mu;
      rstd[row] = inv;
    }
  }
}

// Block b owns rows [b * kRowsPerBlock, (b + 1) * kRowsPerBlock): dx by a warp per row, then the
// block's partial of dweight and dbias by a thread per column.
__global__ void __launch_bounds__(kBlockThreads)
    warp_backward_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                         const float* __restrict__ mean, const float* __restrict__ rstd,
                         const float* __restrict__ dy, float* __restrict__ dx,
                         float* __restrict__ partial, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t first = int64_t{blockIdx.x} * kRowsPerBlock;
  const int64_t end = first + kRowsPerBlock < rows ? first + kRowsPerBlock : rows;
  for (int64_t row = first + threadIdx.x / kWarpSize; row < end; row += kWarpsPerBlock) {
    const int64_t base = row * cols;
    const float mu = mean[row], inv = rstd[row];
    float g_sum = 0.0f, g_xhat_sum = 0.0f;
    for (int64_t c = lane; c < cols; c += kWarpSize) {
      const float g = dy[base + c] * weight[c];
      g_sum += g;
      g_xhat_sum += g * (x[base + c] - mu) * inv;
    }
    const float mean_g = cuda::warp_allreduce(g_sum, cuda::Sum{}) / static_cast<float>(cols);
    const float mean_g_xhat =
        cuda::warp_allreduce(g_xhat_sum, cuda::Sum{}) / static_cast<float>(cols);
    for (int64_t c = lane; c < cols; c += kWarpSize) {
      const float x_hat = (x[base + c] - mu) * inv;
      dx[base + c] = inv * (dy[base + c] * weight[c] - mean_g - x_hat * mean_g_xhat);
    }
  }
  for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) {
    float dw = 0.0f, db = 0.0f;
    for (int64_t row = first; row < end; ++row) {
      const float g = dy[row * cols + c];
      dw += g * (x[row * cols + c] - mean[row]) * rstd[row];
      db += g;
    }
    partial[int64_t{blockIdx.x} * cols + c] = dw;
    partial[(int64_t{gridDim.x} + blockIdx.x) * cols + c] = db;
  }
}

}  // namespace

void v2_warp_per_row(const LayerNormForwardArgs& args) {
  if (args.rows == 0 || args.cols == 0) return;
  KILN_LAUNCH(static_cast<unsigned>(v2_blocks(args.rows)), kBlockThreads, 0, cuda::stream(),
              warp_forward_kernel)
  (args.x, args.weight, args.bias, args.eps, args.y, args.mean, args.rstd, args.rows, args.cols);
  KILN_CUDA_CHECK_LAUNCH();
}

void v2_warp_per_row_backward(const LayerNormBackwardArgs& args) {
  if (args.rows == 0 || args.cols == 0) return;
  const int64_t blocks = v2_backward_blocks(args.rows);
  float* partial = static_cast<float*>(args.workspace);
  KILN_LAUNCH(static_cast<unsigned>(blocks), kBlockThreads, 0, cuda::stream(), warp_backward_kernel)
  (args.x, args.weight, args.mean, args.rstd, args.dy, args.dx, partial, args.rows, args.cols);
  KILN_CUDA_CHECK_LAUNCH();
  launch_column_sums(partial, blocks, args.cols, args.dweight, args.dbias);
}

}  // namespace kiln::lab::layernorm
