// What every CUDA kernel file shares, nvcc's and g++'s alike (the .cu kernels, and conv2d.cpp and
// matmul.cpp, which call cuDNN and cuBLAS): the stream to launch on, and how big a grid to launch.
//
// Every kiln kernel that walks n items does it with a grid-stride loop,
//
//   for (int64_t i = global_thread_index(); i < n; i += grid_stride()) ...
//
// so its grid is a performance choice and never a correctness one: grid_for sizes it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kiln/core/cuda.h"
#include "kiln/core/device_code.h"
#include "kiln/sim/kernel_macros.h"

namespace kiln::cuda {

// The current stream of the current device and thread (core/cuda.h): every launch and library
// call goes on it, so kiln's kernels follow StreamGuard as PyTorch's follow torch.cuda.stream.
inline CUstream_st* stream() {
  return current_stream_handle();
}

// Threads per block for one-dimensional kernels: eight warps, few enough that an SM holds several
// blocks (one block waiting at a barrier or finishing its tail does not leave the SM idle), many
// enough that a grid needs few blocks.
inline constexpr int kThreads = 256;

// Past this many blocks a grid-stride loop gives each thread several items. 2^16 blocks fill any
// current GPU many times over (an H200 holds about a thousand blocks of kThreads at once, so the
// partly idle last wave costs little), launching more only adds block scheduling, and the grid
// stays far from the 2^31 - 1 limit of gridDim.x however large n is.
inline constexpr int64_t kMaxBlocks = int64_t{1} << 16;

inline constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Blocks for `items` work items at `per_block` items a block (threads, or rows for kernels that
// give each row a warp): at least one, at most max_blocks. The kernel must loop with a grid stride
// past max_blocks * per_block items. A caller whose result depends on the grid (per-block partials
// combined in block order, loss.cu) passes a fixed max_blocks, so the grid never depends on more
// than the problem size.
inline unsigned grid_for(int64_t items, int64_t per_block = kThreads,
                         int64_t max_blocks = kMaxBlocks) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(items, per_block), 1, max_blocks));
}

#ifdef KILN_DEVICE_CODE
// A thread's first item and the step of its grid-stride loop over a one-dimensional grid, in 64
// bits because n may pass 2^31.
__device__ __forceinline__ int64_t global_thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}
#endif

}  // namespace kiln::cuda
