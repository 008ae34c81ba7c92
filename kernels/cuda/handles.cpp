// Handles live in per-device pools. A thread takes one from the pool on first use and gives it back
// when it exits, so threads that come and go (DataLoader workers, test threads) reuse handles
// instead of creating one each. The pools are never destroyed: destroying a handle at process exit
// may run after the CUDA driver has shut down.
//
// A cuBLAS handle also has a workspace of its own for each stream it has run on, as PyTorch's
// CublasHandlePool gives each (handle, stream). cublasSetStream, called before every GEMM to follow
// the current stream, puts the handle back on its default workspace pool: then a thread that
// queues a GEMM on one stream and the next, under a StreamGuard, on another could have both use
// one buffer at once. cublasSetWorkspace after it binds the stream's own.
#include "kiln/kernels/cuda/handles.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::cuda {

namespace {

// A cuBLAS handle and its workspace on each stream. The workspaces come from the caching allocator
// (aligned to 512 bytes; cuBLAS asks for 256) and, like the pool's streams, are never freed: the
// handle may be handed to another thread, and its streams live as long as the process.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};
struct CublasHandle {
  cublasHandle_t handle = nullptr;
  std::unordered_map<cudaStream_t, Workspace> workspaces;
};

CublasHandle* create_cublas() {
  cublasHandle_t handle = nullptr;
  KILN_CUBLAS_CHECK(cublasCreate(&handle));
  // 16-bit products reduce in f32, never in the output type: the CPU computes them in f32 and
  // rounds once, and the parity tests hold the GPU to that.
  KILN_CUBLAS_CHECK(cublasSetMathMode(
      handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                        CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  return new CublasHandle{handle, {}};  // never destroyed, see the file comment
}

// The cuBLAS documentation's recommended workspace (cublasSetWorkspace): 32 MiB on Hopper and
// later, 4 MiB (the size of cuBLAS's own default pool) before.
size_t cublas_workspace_bytes(int device) {
  int major = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return (major >= 9 ? size_t{32} : size_t{4}) << 20;
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

HandlePool<CublasHandle*>& cublas_pool() {
  static auto* pool = new HandlePool<CublasHandle*>;  // never destroyed, see the file comment
  return *pool;
}

HandlePool<cudnnHandle_t>& cudnn_pool() {
  static auto* pool = new HandlePool<cudnnHandle_t>;
  return *pool;
}

// The handles one thread holds, indexed by device; returned to the pools when the thread exits.
struct ThreadHandles {
  std::vector<CublasHandle*> cublas;
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
  CublasHandle*& held = slot(thread_handles().cublas, device);
  if (held == nullptr) held = cublas_pool().take(device, create_cublas);
  cudaStream_t current = stream();
  KILN_CUBLAS_CHECK(cublasSetStream(held->handle, current));
  Workspace& workspace = held->workspaces[current];
  if (workspace.data == nullptr) {
    // Allocated with the stream current, so the caching allocator files the block under it.
    const size_t bytes = cublas_workspace_bytes(device);
    workspace.data = allocator(device).allocate(bytes);
    workspace.bytes = bytes;
  }
  KILN_CUBLAS_CHECK(cublasSetWorkspace(held->handle, workspace.data, workspace.bytes));
  return held->handle;
}

cudnnHandle_t cudnn_handle(int device) {
  cudnnHandle_t& handle = slot(thread_handles().cudnn, device);
  if (handle == nullptr) handle = cudnn_pool().take(device, create_cudnn);
  KILN_CUDNN_CHECK(cudnnSetStream(handle, stream()));
  return handle;
}

}  // namespace kiln::cuda
