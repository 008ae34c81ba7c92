// What every CUDA kernel family header shares. A family header declares its tensor-level entry
// points in namespace kiln::gpu, with the same signatures as its kernels/cpu twin; in a build
// without CUDA it defines them instead as inline functions that throw, so op entry points branch
// on the device without #if. No tensor can live on a GPU in such a build, so they never run.
#pragma once

#include <string>

#include "kiln/core/error.h"

#if KILN_WITH_CUDA
struct CUstream_st;  // cudaStream_t is CUstream_st*; declared here so g++ files need no CUDA header
#endif

namespace kiln::gpu {

#if KILN_WITH_CUDA
// The current stream of the current device and thread: every launch and library call goes on it.
CUstream_st* stream();
#endif

[[noreturn]] inline void not_built(const char* op) {
  throw DeviceError(std::string(op) + ": kiln was built without CUDA, so no tensor can be on a GPU");
}

}  // namespace kiln::gpu
