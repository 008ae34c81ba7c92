// The CUDA runtime functions of a build with CUDA. A machine without a GPU (or without a driver)
// makes cudaGetDeviceCount fail; that means "not available", never an error.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"

namespace kiln::cuda {

namespace {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    int previous = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&previous));
    KILN_CUDA_CHECK(cudaSetDevice(index_));
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, nbytes);
    cudaSetDevice(previous);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      throw OutOfMemoryError(fmt::format(
          "cuda allocator: out of memory allocating {} bytes on cuda:{} (free {} of {} bytes; kiln "
          "holds {} bytes)",
          nbytes, index_, free_bytes, total_bytes, stats().current_bytes));
    }
    KILN_CUDA_CHECK(status);
    record_allocate(nbytes);
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    cudaFree(ptr);
    record_free(nbytes);
  }
  Device device() const override { return Device::cuda(index_); }

 private:
  int index_;
};

}  // namespace

bool is_built() {
  return true;
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

bool is_available() {
  return device_count() > 0;
}

std::string device_name(int index) {
  KILN_CHECK(index >= 0 && index < device_count(), DeviceError,
             "cuda::device_name: no device cuda:{} ({} visible)", index, device_count());
  cudaDeviceProp prop{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return prop.name;
}

Allocator& allocator(int index) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<CudaAllocator>> allocators;
  std::lock_guard<std::mutex> lock(mutex);
  int count = device_count();
  KILN_CHECK(index >= 0 && index < count, DeviceError,
             "cuda::allocator: no device cuda:{} ({} visible)", index, count);
  if (allocators.empty())
    for (int i = 0; i < count; ++i) allocators.push_back(std::make_unique<CudaAllocator>(i));
  return *allocators[index];
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  cudaMemcpyKind kind = cudaMemcpyDefault;  // unified addressing tells the runtime which is which
  (void)dst_device;
  (void)src_device;
  KILN_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, kind));
}

void memset_zero(void* ptr, Device device, size_t nbytes) {
  if (nbytes == 0) return;
  (void)device;
  KILN_CUDA_CHECK(cudaMemset(ptr, 0, nbytes));
}

void synchronize() {
  KILN_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace kiln::cuda
