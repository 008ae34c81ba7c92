// Softmax v1: three passes, a block per row. The textbook order: the row's max (so exp never
// overflows), then the sum of exp(x - max), then each exp(x - max) / sum. Each pass's combine is a
// tree in shared memory (block_tree: a barrier after the stores, one after each of the 8 levels,
// and one before the scratch is reused: 10), and the result is read back by every thread.
//
//   for (c = tid; c < cols; c += 256) max = fmaxf(max, in[c]);       max = block_tree(max)
//   for (c = tid; c < cols; c += 256) sum += expf(in[c] - max);      sum = block_tree(sum)
//   for (c = tid; c < cols; c += 256) out[c] = expf(in[c] - max) / sum;
//
// What it costs: the row is read three times (12 bytes read and 4 written an element, against
// the 8 a softmax needs), and 20 barriers a row for the two trees.
//
// measured: not yet on a GPU.
#include <cmath>
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/lab/softmax/tiling.h"
#include "kiln/kernels/cuda/lab/softmax/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::softmax {

namespace {

// The block's combine of one value a thread, by a tree in shared memory; every thread gets it.
template <class Combine>
__device__ float block_tree(float v, float* scratch, Combine combine) {
  const int tid = threadIdx.x;
  scratch[tid] = v;
  __syncthreads();
  for (int stride = kRowThreads / 2; stride > 0; stride /= 2) {
    if (tid < stride) scratch[tid] = combine(scratch[tid], scratch[tid + stride]);
    __syncthreads();
  }
  const float result = scratch[0];
  __syncthreads();  // everyone has read scratch[0] before the next tree writes it
  return result;
}

struct MaxOf {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOf {
  __device__ float operator()(float a, float b) const { return a + b; }
};

__global__ void __launch_bounds__(kRowThreads)
    three_pass_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                      int64_t cols) {
  __shared__ float scratch[kRowThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* in = x + row * cols;
    float* out = y + row * cols;
    float max = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) max = fmaxf(max, in[c]);
    max = block_tree(max, scratch, MaxOf{});
    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) sum += expf(in[c] - max);
    sum = block_tree(sum, scratch, SumOf{});
    const float scale = 1.0f / sum;
    for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) out[c] = expf(in[c] - max) * scale;
  }
}

}  // namespace

void v1_three_pass(const SoftmaxArgs& args) {
  if (args.rows == 0 || args.cols == 0) return;
  KILN_LAUNCH(static_cast<unsigned>(v1_blocks(args.rows)), kRowThreads, 0, cuda::stream(),
              three_pass_kernel)
  (args.x, args.y, args.rows, args.cols);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::lab::softmax
