// What every CUDA kernel file shares, nvcc's and g++'s alike (the .cu kernels, and conv2d.cpp and
// matmul.cpp, which call cuDNN and cuBLAS): the stream to launch on.
#pragma once

#include "kiln/core/cuda.h"

namespace kiln::cuda {

// The current stream of the current device and thread (core/cuda.h): every launch and library
// call goes on it, so kiln's kernels follow StreamGuard as PyTorch's follow torch.cuda.stream.
inline CUstream_st* stream() {
  return current_stream_handle();
}

}  // namespace kiln::cuda
