// Layer norm v0.
//
// Forward: kiln's own kernel, called through the CUDA table of the normalisation family
// (kernels/normalization.h) as the layer_norm op calls it: a warp per row, the row's mean and
// variance accumulated in double (kernels/cuda/normalization.cu), three reads of the row.
//
// Backward: kiln has no layer-norm backward kernel (its autograd composes the backward from
// elementwise ops and reductions, several launches), so version 0 of the backward is a plain
// reference in double: a warp per row for dx, and for dweight and dbias a block per 32 columns
// whose 8 rows of threads each walk an eighth of the rows. Its "% of v0" column therefore compares
// with this reference, not with a library.
//
// measured: not yet on a GPU.
#include <cstdint>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/lab/borrowed_tensor.h"
#include "kiln/kernels/cuda/lab/layernorm/tiling.h"
#include "kiln/kernels/cuda/lab/layernorm/versions.h"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/normalization.h"

namespace kiln::lab::layernorm {

namespace {

__global__ void __launch_bounds__(kWarpsPerBlock* kWarpSize)
    reference_dx_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                        const float* __restrict__ mean, const float* __restrict__ rstd,
                        const float* __restrict__ dy, float* __restrict__ dx, int64_t rows,
                        int64_t cols) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t step = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarpSize; row < rows;
       row += step) {
    const int64_t base = row * cols;
    const double mu = mean[row], inv = rstd[row];
    double g_sum = 0.0, g_xhat_sum = 0.0;
    for (int64_t c = lane; c < cols; c += kWarpSize) {
      const double g = static_cast<double>(dy[base + c]) * weight[c];
      g_sum += g;
      g_xhat_sum += g * (x[base + c] - mu) * inv;
    }
    const double mean_g = cuda::warp_allreduce(g_sum, cuda::Sum{}) / static_cast<double>(cols);
    const double mean_g_xhat =
        cuda::warp_allreduce(g_xhat_sum, cuda::Sum{}) / static_cast<double>(cols);
    for (int64_t c = lane; c < cols; c += kWarpSize) {
      const double g = static_cast<double>(dy[base + c]) * weight[c];
      const double x_hat = (x[base + c] - mu) * inv;
      dx[base + c] = static_cast<float>(inv * (g - mean_g - x_hat * mean_g_xhat));
    }
  }
}

// Block (32, 8): threadIdx.x a column, threadIdx.y an eighth of the rows.
constexpr int kColumnRowsInParallel = 8;

__global__ void __launch_bounds__(kWarpSize* kColumnRowsInParallel)
    reference_columns_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                             const float* __restrict__ rstd, const float* __restrict__ dy,
                             float* __restrict__ dweight, float* __restrict__ dbias, int64_t rows,
                             int64_t cols) {
  __shared__ double dw_part[kColumnRowsInParallel][kWarpSize];
  __shared__ double db_part[kColumnRowsInParallel][kWarpSize];
  const int64_t c = int64_t{blockIdx.x} * kWarpSize + threadIdx.x;
  double dw = 0.0, db = 0.0;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kColumnRowsInParallel) {
      const double g = dy[r * cols + c];
      dw += g * (x[r * cols + c] - static_cast<double>(mean[r])) * rstd[r];
      db += g;
    }
  dw_part[threadIdx.y][threadIdx.x] = dw;
  db_part[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int k = 1; k < kColumnRowsInParallel; ++k) {
      dw += dw_part[k][threadIdx.x];
      db += db_part[k][threadIdx.x];
    }
    dweight[c] = static_cast<float>(dw);
    dbias[c] = static_cast<float>(db);
  }
}

}  // namespace

void v0_kiln(const LayerNormForwardArgs& args) {
  const Device device = Device::cuda(cuda::current_device());
  const int64_t rows = args.rows, cols = args.cols;
  NormalizationKernels::cuda->layer_norm(borrow_tensor(args.x, {rows, cols}, DType::f32, device),
                                         borrow_tensor(args.weight, {cols}, DType::f32, device),
                                         borrow_tensor(args.bias, {cols}, DType::f32, device),
                                         args.eps,
                                         borrow_tensor(args.y, {rows, cols}, DType::f32, device),
                                         borrow_tensor(args.mean, {rows}, DType::f32, device),
                                         borrow_tensor(args.rstd, {rows}, DType::f32, device));
}

void v0_reference_backward(const LayerNormBackwardArgs& args) {
  if (args.rows == 0 || args.cols == 0) return;
  KILN_LAUNCH(static_cast<unsigned>(v2_blocks(args.rows)), kWarpsPerBlock * kWarpSize, 0,
              cuda::stream(), reference_dx_kernel)
  (args.x, args.weight, args.mean, args.rstd, args.dy, args.dx, args.rows, args.cols);
  KILN_CUDA_CHECK_LAUNCH();
  KILN_LAUNCH(static_cast<unsigned>(ceil_div(args.cols, kWarpSize)),
              dim3(kWarpSize, kColumnRowsInParallel), 0, cuda::stream(), reference_columns_kernel)
  (args.x, args.mean, args.rstd, args.dy, args.dweight, args.dbias, args.rows, args.cols);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::layernorm
