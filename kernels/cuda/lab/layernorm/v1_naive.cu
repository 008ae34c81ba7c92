// Layer norm v1: a thread per row (forward and dx), a thread per column (dweight and dbias). The
// loops read as the formulas do (reference.h), in f32:
//
//   for (c = 0; c < cols; ++c) sum += in[c];                  mean = sum / cols
//   for (c = 0; c < cols; ++c) sq += (in[c] - mean)^2;        rstd = rsqrtf(sq / cols + eps)
//   for (c = 0; c < cols; ++c) y[c] = (in[c] - mean) * rstd * weight[c] + bias[c];
//
// What it costs: neighbouring threads read elements a whole row apart, so each warp's load
// touches 32 different 32-byte sectors to use 4 bytes of each (1/8 of the bandwidth), and there
// are only `rows` threads. dweight and dbias are read along columns, which is coalesced, but with
// only `cols` threads each walking every row.
//
// measured: not yet on a GPU.
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/lab/layernorm/tiling.h"
#include "kiln/kernels/cuda/lab/layernorm/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::layernorm {

namespace {

__global__ void __launch_bounds__(kThreads)
    naive_forward_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                         const float* __restrict__ bias, float eps, float* __restrict__ y,
                         float* __restrict__ mean, float* __restrict__ rstd, int64_t rows,
                         int64_t cols) {
  for (int64_t row = cuda::global_thread_index(); row < rows; row += cuda::grid_stride()) {
    const float* in = x + row * cols;
    float* out = y + row * cols;
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) sum += in[c];
    const float mu = sum / static_cast<float>(cols);
    float squares = 0.0f;
    for (int64_t c = 0; c < cols; ++c) squares += (in[c] - mu) * (in[c] - mu);
    const float inv = rsqrtf(squares / static_cast<float>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) out[c] = (in[c] - mu) * inv * weight[c] + bias[c];
    mean[row] = mu;
    rstd[row] = inv;
  }
}

__global__ void __launch_bounds__(kThreads)
    naive_dx_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                    const float* __restrict__ mean, const float* __restrict__ rstd,
                    const float* __restrict__ dy, float* __restrict__ dx, int64_t rows,
                    int64_t cols) {
  for (int64_t row = cuda::global_thread_index(); row < rows; row += cuda::grid_stride()) {
    const int64_t base = row * cols;
    const float mu = mean[row], inv = rstd[row];
    float g_sum = 0.0f, g_xhat_sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const float g = dy[base + c] * weight[c];
      g_sum += g;
      g_xhat_sum += g * (x[base + c] - mu) * inv;
    }
    const float mean_g = g_sum / static_cast<float>(cols);
    const float mean_g_xhat = g_xhat_sum / static_cast<float>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const float x_hat = (x[base + c] - mu) * inv;
      dx[base + c] = inv * (dy[base + c] * weight[c] - mean_g - x_hat * mean_g_xhat);
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    naive_columns_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                         const float* __restrict__ rstd, const float* __restrict__ dy,
                         float* __restrict__ dweight, float* __restrict__ dbias, int64_t rows,
                         int64_t cols) {
  for (int64_t c = cuda::global_thread_index(); c < cols; c += cuda::grid_stride()) {
    float dw = 0.0f, db = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const float g = dy[r * cols + c];
      dw += g * (x[r * cols + c] - mean[r]) * rstd[r];
      db += g;
    }
    dweight[c] = dw;
    dbias[c] = db;
  }
}

}  // namespace

void v1_naive(const LayerNormForwardArgs& args) {
  if (args.rows == 0 || args.cols == 0) return;
  KILN_LAUNCH(static_cast<unsigned>(v1_blocks(args.rows)), kThreads, 0, cuda::stream(),
              naive_forward_kernel)
  (args.x, args.weight, args.bias, args.eps, args.y, args.mean, args.rstd, args.rows, args.cols);
  KILN_CUDA_CHECK_LAUNCH();
}

void v1_naive_backward(const LayerNormBackwardArgs& args) {
  if (args.rows == 0 || args.cols == 0) return;
  KILN_LAUNCH(static_cast<unsigned>(v1_blocks(args.rows)), kThreads, 0, cuda::stream(),
              naive_dx_kernel)
  (args.x, args.weight, args.mean, args.rstd, args.dy, args.dx, args.rows, args.cols);
  KILN_CUDA_CHECK_LAUNCH();
  KILN_LAUNCH(static_cast<unsigned>(column_blocks(args.cols)), kThreads, 0, cuda::stream(),
              naive_columns_kernel)
  (args.x, args.mean, args.rstd, args.dy, args.dweight, args.dbias, args.rows, args.cols);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::layernorm
