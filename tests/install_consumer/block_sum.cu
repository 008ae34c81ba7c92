// A kernel of your own beside kiln's: nvcc compiles it for a GPU, and with kiln built for its CUDA
// simulator, kiln_cuda_sim_sources() compiles it as C++ to run on the CPU.
#include <cuda_runtime.h>
#include <kiln/sim/kernel_macros.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "block_sum.h"

namespace {

constexpr int kThreads = 256;

// Each block adds its kThreads elements in shared memory, halving the threads that add at each
// step; thread 0 then adds the block's sum to *total. The __syncthreads() after each step lets no
// thread read a partial sum before its writer has written it.
__global__ void block_sum_kernel(const float* x, int64_t n, float* total) {
  __shared__ float partial[kThreads];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  partial[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(total, partial[0]);
}

}  // namespace

void block_sum(const float* x, int64_t n, float* total, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  // block_sum_kernel<<<blocks, kThreads, 0, stream>>>(x, n, total), for nvcc and the simulator.
  KILN_LAUNCH(blocks, kThreads, 0, stream, block_sum_kernel)(x, n, total);
  if (const cudaError_t error = cudaGetLastError(); error != cudaSuccess)
    throw std::runtime_error(std::string("block_sum_kernel: ") + cudaGetErrorString(error));
}
