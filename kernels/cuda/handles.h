// cuBLAS and cuDNN handles: one per device and thread, created on first use and reused. A handle is
// not thread-safe and is bound to the device current when it was made, hence the key. Only CUDA
// translation units include this header (it pulls in the libraries' headers).
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

namespace kiln::cuda {

// The calling thread's handle for `device`, which must be current (cuda::DeviceGuard), with its
// stream set to stream() (and a cuBLAS handle with that stream's own workspace): fetch it right
// before each library call, so that a change of the current stream is always followed.
cublasHandle_t cublas_handle(int device);
cudnnHandle_t cudnn_handle(int device);

}  // namespace kiln::cuda
