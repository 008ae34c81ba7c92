// The devices of a build with CUDA: counting and choosing them, their properties, the library
// versions, DeviceGuard and synchronize. A machine without a GPU (or without a driver) makes
// cudaGetDeviceCount fail; that means "not available", never an error.
#include <cublas_api.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstddef>
#include <string>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/cuda_runtime/internal.h"

namespace kiln::cuda {

int device_count() {
  // The set of visible devices is fixed when the driver initialises (CUDA_VISIBLE_DEVICES is read
  // once), and this is asked on every allocation, so it is asked of the driver once.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

bool is_built() {
  return true;
}

bool is_available() {
  return device_count() > 0;
}

int detail::resolve(const char* what, int device) {
  int count = device_count();
  KILN_CHECK(count > 0, DeviceError,
             "{}: no GPU is visible (check the driver and CUDA_VISIBLE_DEVICES)", what);
  if (device == -1) KILN_CUDA_CHECK(cudaGetDevice(&device));
  KILN_CHECK(device >= 0 && device < count, DeviceError, "{}: no device cuda:{} ({} visible)", what,
             device, count);
  return device;
}

DeviceProperties get_device_properties(int device) {
  device = detail::resolve("cuda::get_device_properties", device);
  cudaDeviceProp prop{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceProperties out;
  out.name = prop.name;
  out.major = prop.major;
  out.minor = prop.minor;
  out.total_memory = prop.totalGlobalMem;
  out.multi_processor_count = prop.multiProcessorCount;
  out.warp_size = prop.warpSize;
  out.max_threads_per_block = prop.maxThreadsPerBlock;
  out.l2_cache_size = static_cast<size_t>(prop.l2CacheSize);
  return out;
}

std::string device_name(int index) {
  KILN_CHECK(index >= 0 && index < device_count(), DeviceError,
             "cuda::device_name: no device cuda:{} ({} visible)", index, device_count());
  return get_device_properties(index).name;
}

LibraryVersions library_versions() {
  LibraryVersions v;
  // Queries that need no device: they answer on a machine without a GPU too.
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  cudaGetLastError();
  int major = 0, minor = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS)
    v.cublas = major * 1000 + minor * 10;
  // cuDNN 9 encodes major * 10000 + minor * 100 + patch, NCCL 2 the same.
  const size_t cudnn = cudnnGetVersion();
  v.cudnn = static_cast<int>(cudnn / 10000 * 1000 + cudnn / 100 % 100 * 10);
  v.nccl_headers = NCCL_MAJOR * 1000 + NCCL_MINOR * 10;
  return v;
}

MemoryInfo mem_get_info(int device) {
  DeviceGuard guard(device);
  MemoryInfo info;
  KILN_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

int current_device() {
  return detail::resolve("cuda::current_device", -1);
}

void set_device(int device) {
  device = detail::resolve("cuda::set_device", device);
  KILN_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::DeviceGuard(int device) {
  current_ = detail::resolve("cuda::DeviceGuard", device);
  KILN_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != current_) KILN_CUDA_CHECK(cudaSetDevice(current_));
}

DeviceGuard::~DeviceGuard() {
  // Restores even when the scope switched devices itself. Unchecked: a destructor cannot throw,
  // and a sticky error shows at the next checked call anyway.
  int now = previous_;
  cudaGetDevice(&now);
  if (now != previous_) cudaSetDevice(previous_);
}

void synchronize(int device) {
  DeviceGuard guard(device);
  KILN_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace kiln::cuda
