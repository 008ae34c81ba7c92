// Layer norm v3: a block per row that holds the row in registers, with float4 loads. Each thread
// loads its 16 elements once (4 float4s), and both sums are taken from the registers: first the
// mean, then the squared deviations from it (two-level sums: each thread's own, then the block's,
// by kiln's row_allreduce), which is as exact as the two-pass formula and needs no Welford update:
//
//   for (i) load(in + (tid + i * blockDim.x) * 4, v[i]);            // the only read of x
//   mu = row_allreduce(sum of v) / cols;
//   inv = rsqrtf(row_allreduce(sum of (v - mu)^2) / cols + eps);
//   for (i) store(out + ..., (v[i] - mu) * inv * weight + bias);
//
// The backward does the same with x_hat and dy in registers, one combined row_allreduce for
// sum(g) and sum(g * x_hat), and a fixed grid of kBackwardBlocks blocks, each walking rows
// b, b + kBackwardBlocks, ...: a thread always owns the same columns, so it keeps their dweight and
// dbias in registers across all its block's rows and writes one partial per block at the end
// (column_sums.cu adds them), with no second walk over x and dy.
//
// Why it should be faster: x (and dy) are read once, 16 bytes an access: 8 bytes an element for
// the forward and 12 for the backward, the least they can move. Rows longer than the registers
// hold (16384 elements forward, 8192 backward) take v2; rows not a multiple of 4 long use scalar
// loads.
//
// measured: not yet on a GPU.
#include <algorithm>
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/lab/layernorm/column_sums.h"
#include "kiln/kernels/cuda/lab/layernorm/tiling.h"
#include "kiln/kernels/cuda/lab/layernorm/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::layernorm {

namespace {

template <int kWidth>
__device__ __forceinline__ void load(const float* p, float (&v)[kWidth]) {
  if constexpr (kWidth == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    v[0] = *p;
  }
}

template <int kWidth>
__device__ __forceinline__ void store(float* p, const float (&v)[kWidth]) {
  if constexpr (kWidth == 4)
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  else
    *p = v[0];
}

// The first element of item i of this thread (kWidth of them), in row coordinates.
template <int kWidth>
__device__ __forceinline__ int64_t item_column(int i) {
  return (int64_t{threadIdx.x} + int64_t{i} * blockDim.x) * kWidth;
}

template <int kWidth>
__global__ void __launch_bounds__(kMaxThreads)
    cached_forward_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                          const float* __restrict__ bias, float eps, float* __restrict__ y,
                          float* __restrict__ mean, float* __restrict__ rstd, int64_t rows,
                          int64_t cols) {
  constexpr int kItems = kElementsPerThread / kWidth;
  __shared__ cuda::RowReduceSmem<float> smem;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* in = x + row * cols;
    float v[kItems][kWidth];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (item_column<kWidth>(i) < cols) {
        load<kWidth>(in + item_column<kWidth>(i), v[i]);
      } else {
#pragma unroll
        for (int w = 0; w < kWidth; ++w) v[i][w] = 0.0f;
      }
#pragma unroll
      for (int w = 0; w < kWidth; ++w) sum += v[i][w];
    }
    const float mu = cuda::row_allreduce(sum, cuda::Sum{}, 0.0f, smem) / static_cast<float>(cols);
    float squares = 0.0f;
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if (item_column<kWidth>(i) < cols)
#pragma unroll
        for (int w = 0; w < kWidth; ++w) squares += (v[i][w] - mu) * (v[i][w] - mu);
    const float inv = rsqrtf(
        cuda::row_allreduce(squares, cuda::Sum{}, 0.0f, smem) / static_cast<float>(cols) + eps);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t c = item_column<kWidth>(i);
      if (c >= cols) continue;
      float w[kWidth], b[kWidth];
      load<kWidth>(weight + c, w);
      load<kWidth>(bias + c, b);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) v[i][k] = (v[i][k] - mu) * inv * w[k] + b[k];
      store<kWidth>(y + row * cols + c, v[i]);
    }
    if (threadIdx.x == 0) {
      mean[row] = mu;
      rstd[row] = inv;
    }
  }
}

struct TwoSums {
  float g;       // sum of g = dy * weight over the row
  float g_xhat;  // sum of g * x_hat
};
struct AddTwoSums {
  __device__ __forceinline__ TwoSums operator()(TwoSums a, TwoSums b) const {
    return {a.g + b.g, a.g_xhat + b.g_xhat};
  }
};

template <int kWidth>
__global__ void __launch_bounds__(kBackwardMaxThreads)
    cached_backward_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                           const float* __restrict__ mean, const float* __restrict__ rstd,
                           const float* __restrict__ dy, float* __restrict__ dx,
                           float* __restrict__ partial, int64_t rows, int64_t cols) {
  constexpr int kItems = kElementsPerThread / kWidth;
  __shared__ cuda::RowReduceSmem<TwoSums> smem;
  float dw[kItems][kWidth] = {}, db[kItems][kWidth] = {};
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    const float mu = mean[row], inv = rstd[row];
    float x_hat[kItems][kWidth], g[kItems][kWidth];
    TwoSums sums{0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t c = item_column<kWidth>(i);
      if (c < cols) {
        float w[kWidth];
        load<kWidth>(x + base + c, x_hat[i]);
        load<kWidth>(dy + base + c, g[i]);
        load<kWidth>(weight + c, w);
#pragma unroll
        for (int k = 0; k < kWidth; ++k) {
          x_hat[i][k] = (x_hat[i][k] - mu) * inv;
          dw[i][k] += g[i][k] * x_hat[i][k];
          db[i][k] += g[i][k];
          g[i][k] *= w[k];  // from here on g is dy * weight
          sums.g += g[i][k];
          sums.g_xhat += g[i][k] * x_hat[i][k];
        }
      }
    }
    sums = cuda::row_allreduce(sums, AddTwoSums{}, TwoSums{0.0f, 0.0f}, smem);
    const float mean_g = sums.g / static_cast<float>(cols);
    const float mean_g_xhat = sums.g_xhat / static_cast<float>(cols);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t c = item_column<kWidth>(i);
      if (c >= cols) continue;
#pragma unroll
      for (int k = 0; k < kWidth; ++k)
        g[i][k] = inv * (g[i][k] - mean_g - x_hat[i][k] * mean_g_xhat);
      store<kWidth>(dx + base + c, g[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t c = item_column<kWidth>(i);
    if (c >= cols) continue;
    store<kWidth>(partial + int64_t{blockIdx.x} * cols + c, dw[i]);
    store<kWidth>(partial + (int64_t{gridDim.x} + blockIdx.x) * cols + c, db[i]);
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void v3_vectorized(const LayerNormForwardArgs& args) {
  if (args.rows == 0 || args.cols == 0) return;
  if (!v3_cached(args.cols)) return v2_warp_per_row(args);
  const bool aligned =
      aligned16(args.x) && aligned16(args.y) && aligned16(args.weight) && aligned16(args.bias);
  const unsigned blocks = static_cast<unsigned>(std::min(args.rows, kMaxGridBlocks));
  const int threads = v3_threads(args.cols);
  if (v3_width(args.cols, aligned) == 4)
    KILN_LAUNCH(blocks, threads, 0, cuda::stream(), cached_forward_kernel<4>)
  (args.x, args.weight, args.bias, args.eps, args.y, args.mean, args.rstd, args.rows, args.cols);
  else KILN_LAUNCH(blocks, threads, 0, cuda::stream(), cached_forward_kernel<1>)(
      args.x, args.weight, args.bias, args.eps, args.y, args.mean, args.rstd, args.rows, args.cols);
  KILN_CUDA_CHECK_LAUNCH();
}

void v3_vectorized_backward(const LayerNormBackwardArgs& args) {
  if (args.rows == 0 || args.cols == 0) return;
  if (!v3_backward_cached(args.cols)) return v2_warp_per_row_backward(args);
  const bool aligned = aligned16(args.x) && aligned16(args.dy) && aligned16(args.dx) &&
                       aligned16(args.weight) && aligned16(args.workspace);
  const int64_t blocks = v3_backward_blocks(args.rows);
  const int threads = v3_threads(args.cols);
  float* partial = static_cast<float*>(args.workspace);
  if (v3_width(args.cols, aligned) == 4)
    KILN_LAUNCH(static_cast<unsigned>(blocks), threads, 0, cuda::stream(),
                cached_backward_kernel<4>)
  (args.x, args.weight, args.mean, args.rstd, args.dy, args.dx, partial, args.rows, args.cols);
  else KILN_LAUNCH(static_cast<unsigned>(blocks), threads, 0, cuda::stream(),
                   cached_backward_kernel<1>)(args.x, args.weight, args.mean, args.rstd, args.dy,
                                              args.dx, partial, args.rows, args.cols);
  KILN_CUDA_CHECK_LAUNCH();
  launch_column_sums(partial, blocks, args.cols, args.dweight, args.dbias);
}

}  // namespace kiln::lab::layernorm
