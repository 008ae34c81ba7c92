// The devices of a build with CUDA: counting and choosing them, their properties, the library
// versions, DeviceGuard and synchronize. A machine without a GPU (or without a driver) makes
// cudaGetDeviceCount fail; that means "not available", never an error.
#include <cublas_api.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#if KILN_WITH_NCCL
#include <nccl.h>
#endif

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/core/cuda_runtime/internal.h"
#include "kiln/core/op_name.h"

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
#if !KILN_CUDA_SIMULATED
  // The CUDA simulator links neither library (kernels/cuda/simulator/): their versions stay 0.
  int major = 0, minor = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS)
    v.cublas = major * 1000 + minor * 10;
  // cuDNN 9 encodes major * 10000 + minor * 100 + patch, NCCL 2 the same.
  const size_t cudnn = cudnnGetVersion();
  v.cudnn = static_cast<int>(cudnn / 10000 * 1000 + cudnn / 100 % 100 * 10);
#endif
#if KILN_WITH_NCCL
  v.nccl_headers = NCCL_MAJOR * 1000 + NCCL_MINOR * 10;
#endif
  return v;
}

MemoryInfo mem_get_info(int device) {
  DeviceGuard guard(device);
  MemoryInfo info;
  KILN_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

// ---- the devices this process uses ----
//
// Since CUDA 12, cudaSetDevice makes the device's primary context (about 0.5 GiB of its memory),
// and any runtime call on a thread that never chose a device binds device 0's. So a rank of a
// job on GPU 3 must never switch to device 0 just because a thread "was" on it: a DataLoader
// worker, a watchdog, or a DeviceGuard's restore would each leave a context on GPU 0 in every
// rank (and fail on GPUs in exclusive-process mode). kiln remembers which devices it has made
// current (they have a context), and which one set_device chose for the process.

namespace {

std::vector<std::atomic<bool>>& devices_in_use() {
  static auto* in_use = new std::vector<std::atomic<bool>>(static_cast<size_t>(device_count()));
  return *in_use;
}

std::atomic<int> process_device{-1};  // the last device set_device chose

}  // namespace

void detail::note_device_in_use(int device) {
  devices_in_use()[static_cast<size_t>(device)].store(true, std::memory_order_relaxed);
}

bool detail::device_in_use(int device) {
  return device >= 0 && device < device_count() &&
         devices_in_use()[static_cast<size_t>(device)].load(std::memory_order_relaxed);
}

int detail::device_with_context() {
  if (const int chosen = process_device.load(); chosen >= 0) return chosen;
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && device_in_use(current)) return current;
  for (int d = 0; d < device_count(); ++d)
    if (device_in_use(d)) return d;
  return -1;
}

void detail::restore_device(int previous) noexcept {
  int now = previous;
  cudaGetDevice(&now);
  // A device kiln never used was current only because the thread never chose one: switching
  // back to it would make its context for nothing (PyTorch's MaybeSetDevice skips it the same
  // way), so the scope's device stays current instead.
  if (now != previous && device_in_use(previous)) cudaSetDevice(previous);
}

int current_device() {
  return detail::resolve("cuda::current_device", -1);
}

void set_device(int device) {
  device = detail::resolve("cuda::set_device", device);
  KILN_CUDA_CHECK(cudaSetDevice(device));
  detail::note_device_in_use(device);
  process_device.store(device);
}

DeviceGuard::DeviceGuard(int device) {
  current_ = detail::resolve("cuda::DeviceGuard", device);
  KILN_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != current_) KILN_CUDA_CHECK(cudaSetDevice(current_));
  detail::note_device_in_use(current_);
}

DeviceGuard::~DeviceGuard() {
  // Restores even when the scope switched devices itself. Unchecked: a destructor cannot throw,
  // and a sticky error shows at the next checked call anyway.
  detail::restore_device(previous_);
}

void synchronize(int device) {
  const OpNameScope name("cuda::synchronize");
  check_not_capturing("waits for the whole device");
  DeviceGuard guard(device);
  KILN_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace kiln::cuda
