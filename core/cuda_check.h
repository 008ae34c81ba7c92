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

// The same for cuBLAS and cuDNN calls. The macros name library types only where they expand, so
// this header stays free of <cublas_v2.h> and <cudnn.h>: the file that calls the library includes
// its header.
#define KILN_CUBLAS_CHECK(call)                                                               \
  do {                                                                                        \
    cublasStatus_t kiln_status_ = (call);                                                     \
    if (kiln_status_ != CUBLAS_STATUS_SUCCESS)                                                \
      throw ::kiln::Error(std::string("cuBLAS error ") + cublasGetStatusName(kiln_status_) +  \
                          " (" + cublasGetStatusString(kiln_status_) + ") in " #call " at " + \
                          __FILE__ + ":" + std::to_string(__LINE__));                         \
  } while (0)

#define KILN_CUDNN_CHECK(call)                                                              \
  do {                                                                                      \
    cudnnStatus_t kiln_status_ = (call);                                                    \
    if (kiln_status_ != CUDNN_STATUS_SUCCESS)                                               \
      throw ::kiln::Error(std::string("cuDNN error ") + cudnnGetErrorString(kiln_status_) + \
                          " in " #call " at " + __FILE__ + ":" + std::to_string(__LINE__)); \
  } while (0)
