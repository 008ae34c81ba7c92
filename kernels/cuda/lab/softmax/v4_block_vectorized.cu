// Softmax v4: a block per row that holds the row in registers, read with float4 loads. v2 and v3
// read the row twice (once for the max and sum, once to write); here each of the block's threads
// loads its 16 elements once, as 4 float4s, keeps them in registers across both combines, and
// writes exp(v - max) / sum from them:
//
//   for (int i = 0; i < kItems; ++i) load(in + (tid + i * blockDim.x) * 4, v[i]);  // 4 x LDG.128
//   max = row_allreduce(max of v);  v = expf(v - max);  sum = row_allreduce(sum of v);
//   for (int i = 0; i < kItems; ++i) store(out + (tid + i * blockDim.x) * 4, v[i] * (1 / sum));
//
// Why it should be faster: 4 bytes read and 4 written an element, the least a softmax can move;
// with the row in registers the max needs no online rescaling (one exp an element), and 16-byte
// accesses need a quarter of the load and store instructions. The block has just enough warps for
// the row (tiling.h: v4_threads; 256 for 4096 elements), up to 16384 elements a row; longer rows
// stream (v2's online pass, then the write pass) with float4 loads. Rows that are not a multiple
// of 4 long use scalar loads.
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
__device__ __forceinline__ void store(float* p, const float (&v)[kWidth], float scale) {
  if constexpr (kWidth == 4)
    *reinterpret_cast<float4*>(p) =
        make_float4(v[0] * scale, v[1] * scale, v[2] * scale, v[3] * scale);
  else
    *p = v[0] * scale;
}

// kWidth is 4 only where cols is a multiple of 4, so a float4 is wholly in the row or wholly out.
template <int kWidth>
__global__ void __launch_bounds__(kMaxThreads)
    cached_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols) {
  constexpr int kItems = kElementsPerThread / kWidth;
  __shared__ cuda::RowReduceSmem<float> smem;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* in = x + row * cols;
    float* out = y + row * cols;
    float v[kItems][kWidth];
    float max = -INFINITY;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t c = (int64_t{threadIdx.x} + int64_t{i} * blockDim.x) * kWidth;
      if (c < cols) {
        load<kWidth>(in + c, v[i]);
      } else {
#pragma unroll
        for (int w = 0; w < kWidth; ++w) v[i][w] = -INFINITY;  // exp(-inf - max) = 0 below
      }
#pragma unroll
      for (int w = 0; w < kWidth; ++w) max = fmaxf(max, v[i][w]);
    }
    max = cuda::row_allreduce(max, cuda::Max{}, -INFINITY, smem);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int w = 0; w < kWidth; ++w) {
        v[i][w] = expf(v[i][w] - max);
        sum += v[i][w];
      }
    sum = cuda::row_allreduce(sum, cuda::Sum{}, 0.0f, smem);
    const float scale = 1.0f / sum;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t c = (int64_t{threadIdx.x} + int64_t{i} * blockDim.x) * kWidth;
      if (c < cols) store<kWidth>(out + c, v[i], scale);
    }
  }
}

// Rows too long to hold: the online pass, then the write pass, kWidth floats a load.
template <int kWidth>
__global__ void __launch_bounds__(kStreamThreads)
    streaming_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                     int64_t cols) {
  __shared__ cuda::RowReduceSmem<MaxSum> smem;
  constexpr int64_t kStep = int64_t{kStreamThreads} * kWidth;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* in = x + row * cols;
    float* out = y + row * cols;
    MaxSum state = empty_max_sum();
    for (int64_t c = int64_t{threadIdx.x} * kWidth; c < cols; c += kStep) {
      float v[kWidth];
      load<kWidth>(in + c, v);
#pragma unroll
      for (int w = 0; w < kWidth; ++w) online_update(state, v[w]);
    }
    state = cuda::row_allreduce(state, CombineMaxSum{}, empty_max_sum(), smem);
    const float scale = 1.0f / state.sum;
    for (int64_t c = int64_t{threadIdx.x} * kWidth; c < cols; c += kStep) {
      float v[kWidth];
      load<kWidth>(in + c, v);
#pragma unroll
      for (int w = 0; w < kWidth; ++w) v[w] = expf(v[w] - state.max);
      store<kWidth>(out + c, v, scale);
    }
  }
}

template <int kWidth>
void launch(const SoftmaxArgs& args) {
  const unsigned blocks = static_cast<unsigned>(v1_blocks(args.rows));
  if (v4_cached(args.cols))
    KILN_LAUNCH(blocks, v4_threads(args.cols), 0, cuda::stream(), cached_kernel<kWidth>)
  (args.x, args.y, args.rows, args.cols);
  else KILN_LAUNCH(blocks, kStreamThreads, 0, cuda::stream(), streaming_kernel<kWidth>)(
      args.x, args.y, args.rows, args.cols);
  KILN_CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void v4_block_vectorized(const SoftmaxArgs& args) {
  if (args.rows == 0 || args.cols == 0) return;
  if (v4_width(args.cols, aligned16(args.x) && aligned16(args.y)) == 4)
    launch<4>(args);
  else
    launch<1>(args);
}

}  // namespace kiln::lab::softmax
