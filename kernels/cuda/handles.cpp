// Handles live in per-device pools. A thread takes one from the pool on first use and gives it back
// when it exits, so threads that come and go (DataLoader workers, test threads) reuse handles
// instead of creating one each. The pools are never destroyed: destroying a handle at process exit
// may run after the CUDA driver has shut down.
#include "kiln/kernels/cuda/handles.h"

#include <cstddef>
#include <mutex>
#include <vector>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::cuda {

namespace {

cublasHandle_t create_cublas() {
  cublasHandle_t handle = nullptr;
  KILN_CUBLAS_CHECK(cublasCreate(&handle));
  // 16-bit products reduce in f32, never in the output type: the CPU computes them in f32 and
  // rounds once, and the parity tests hold the GPU to that.
  KILN_CUBLAS_CHECK(cublasSetMathMode(
      handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                        CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  return handle;
}

cudnnHandle_t create_cudnn() {
  cudnnHandle_t handle = nullptr;
  KILN_CUDNN_CHECK(cudnnCreate(&handle));
  return handle;
}

template <class Handle>
class HandlePool {
 public:
  Handle take(int device, Handle (*create)()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (device < static_cast<int>(free_.size()) && !free_[device].empty()) {
        Handle handle = free_[device].back();
        free_[device].pop_back();
        return handle;
      }
    }
    return create();
  }
  void give_back(int device, Handle handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (device >= static_cast<int>(free_.size())) free_.resize(device + 1);
    free_[device].push_back(handle);
  }

 private:
  std::mutex mutex_;
  std::vector<std::vector<Handle>> free_;
};

HandlePool<cublasHandle_t>& cublas_pool() {
  static auto* pool = new HandlePool<cublasHandle_t>;  // never destroyed, see the file comment
  return *pool;
}

HandlePool<cudnnHandle_t>& cudnn_pool() {
  static auto* pool = new HandlePool<cudnnHandle_t>;
  return *pool;
}

// The handles one thread holds, indexed by device; returned to the pools when the thread exits.
struct ThreadHandles {
  std::vector<cublasHandle_t> cublas;
  std::vector<cudnnHandle_t> cudnn;
  ~ThreadHandles() {
    for (size_t d = 0; d < cublas.size(); ++d)
      if (cublas[d] != nullptr) cublas_pool().give_back(static_cast<int>(d), cublas[d]);
    for (size_t d = 0; d < cudnn.size(); ++d)
      if (cudnn[d] != nullptr) cudnn_pool().give_back(static_cast<int>(d), cudnn[d]);
  }
};

ThreadHandles& thread_handles() {
  thread_local ThreadHandles handles;
  return handles;
}

template <class Handle>
Handle& slot(std::vector<Handle>& handles, int device) {
  KILN_CHECK(device >= 0, DeviceError, "gpu handles: bad device index {}", device);
  if (device >= static_cast<int>(handles.size())) handles.resize(device + 1, nullptr);
  return handles[device];
}

}  // namespace

cublasHandle_t cublas_handle(int device) {
  cublasHandle_t& handle = slot(thread_handles().cublas, device);
  if (handle == nullptr) handle = cublas_pool().take(device, create_cublas);
  KILN_CUBLAS_CHECK(cublasSetStream(handle, stream()));
  return handle;
}

cudnnHandle_t cudnn_handle(int device) {
  cudnnHandle_t& handle = slot(thread_handles().cudnn, device);
  if (handle == nullptr) handle = cudnn_pool().take(device, create_cudnn);
  KILN_CUDNN_CHECK(cudnnSetStream(handle, stream()));
  return handle;
}

}  // namespace kiln::cuda
