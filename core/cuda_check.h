// KILN_CUDA_CHECK: turns a failed CUDA runtime call into a kiln::Error naming the call, file and
// line. Only for translation units compiled with the CUDA toolkit. Plain string building, since
// .cu files cannot include fmt (see core/error.h).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kiln/core/error.h"

#define KILN_CUDA_CHECK(call)                                                                  \
  do {                                                                                         \
    cudaError_t kiln_status_ = (call);                                                         \
    if (kiln_status_ != cudaSuccess)                                                           \
      throw ::kiln::Error(std::string("CUDA error ") + cudaGetErrorName(kiln_status_) + " (" + \
                          cudaGetErrorString(kiln_status_) + ") in " #call " at " + __FILE__ + \
                          ":" + std::to_string(__LINE__));                                     \
  } while (0)

// After every <<<...>>>: a bad launch configuration is reported here, not at the next sync.
#define KILN_CUDA_CHECK_LAUNCH() KILN_CUDA_CHECK(cudaGetLastError())
