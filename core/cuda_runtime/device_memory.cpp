// Device memory of a build with CUDA: the caching allocator (core/cuda_caching_allocator.h) on
// cudaMalloc, one per device, and the torch-named functions that report on it.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_caching_allocator.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/core/cuda_runtime/internal.h"
#include "kiln/core/error.h"
#include "kiln/core/op_name.h"
#include "kiln/core/tensor.h"

namespace kiln::cuda {

namespace {

class CudaSegments final : public SegmentBackend {
 public:
  explicit CudaSegments(int device) : device_(device) {}

  void* allocate(size_t nbytes) override {
    check_not_capturing(fmt::format(
        "asks for a new segment of {} on cuda:{} outside the graph's memory pool (a cudaMalloc, "
        "which a capture forbids; only the capture's stream allocates from its pool)",
        format_bytes(static_cast<int64_t>(nbytes)), device_));
    return cuda_malloc(nbytes);
  }

  // CUDA forbids cudaMalloc during a capture (it is not stream-ordered), but a segment of the
  // capture's own pool is what the graph will use at every replay, allocated once: this thread's
  // capture mode is relaxed for the call, as PyTorch's allocator does.
  void* allocate_for_capture(size_t nbytes) override {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    KILN_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    void* ptr = nullptr;
    try {
      ptr = cuda_malloc(nbytes);
    } catch (...) {
      cudaThreadExchangeStreamCaptureMode(&mode);
      throw;
    }
    KILN_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    return ptr;
  }

  uint64_t capture_of(std::uintptr_t stream) override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    // The legacy stream answers an error while a blocking stream captures: it is in no capture.
    if (cudaStreamGetCaptureInfo(reinterpret_cast<cudaStream_t>(stream), &status, &id) !=
        cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return status == cudaStreamCaptureStatusNone ? 0 : id;
  }

  void* cuda_malloc(size_t nbytes) {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, nbytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it, the pool retries or reports it
      return nullptr;
    }
    KILN_CUDA_CHECK(status);
    return ptr;
  }

  void free(void* ptr, size_t) noexcept override {
    // cudaFree waits for the device first, so no kernel still queued on any stream can touch the
    // memory afterwards. Errors are ignored: this may run in a destructor, and a sticky error
    // shows at the next checked call.
    int previous = device_;
    cudaGetDevice(&previous);
    if (previous != device_) cudaSetDevice(device_);
    cudaFree(ptr);
    detail::restore_device(previous);
  }

  std::string device_name() const override {
    std::string name = fmt::format("cuda:{}", device_);
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device_) == cudaSuccess)
      name += fmt::format(" ({})", prop.name);
    else
      cudaGetLastError();
    return name;
  }

  void memory_info(size_t* free_bytes, size_t* total_bytes) const override {
    *free_bytes = 0;
    *total_bytes = 0;
    int previous = device_;
    cudaGetDevice(&previous);
    if (previous != device_) cudaSetDevice(device_);
    if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) cudaGetLastError();
    detail::restore_device(previous);
  }

  EventId record_event(std::uintptr_t stream) override {
    DeviceGuard guard(device_);
    cudaEvent_t event = nullptr;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    const cudaError_t status = cudaEventRecord(event, reinterpret_cast<cudaStream_t>(stream));
    if (status != cudaSuccess) cudaEventDestroy(event);
    KILN_CUDA_CHECK(status);
    return reinterpret_cast<EventId>(event);
  }
  bool event_done(EventId event) override {
    DeviceGuard guard(device_);
    return detail::done(cudaEventQuery(reinterpret_cast<cudaEvent_t>(event)), "cudaEventQuery");
  }
  void release_event(EventId event) noexcept override {
    cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event));
  }

 private:
  int device_;
};

class CudaCachingAllocator final : public Allocator {
 public:
  CudaCachingAllocator(int device, bool caching)
      : device_(device), segments_(device), pool_(segments_, caching) {}

  // A block remembers the stream current at its allocation: the one the tensor's producer runs on.
  void* allocate(size_t nbytes) override {
    cudaStream_t stream = detail::thread_streams()[static_cast<size_t>(device_)];
    return pool_.allocate(nbytes, reinterpret_cast<CachingAllocator::StreamId>(stream));
  }
  void deallocate(void* ptr, size_t) override { pool_.free(ptr); }
  void record_stream(void* ptr, cudaStream_t stream) {
    pool_.record_stream(ptr, reinterpret_cast<CachingAllocator::StreamId>(stream));
  }
  Device device() const override { return Device::cuda(device_); }
  MemoryStats stats() const override { return pool_.stats(); }
  void reset_peak() override { pool_.reset_peak(); }
  void empty_cache() { pool_.empty_cache(); }
  CachingAllocator& pool() { return pool_; }

 private:
  int device_;
  CudaSegments segments_;  // before pool_: built first, destroyed last
  CachingAllocator pool_;
};

bool caching_enabled() {
  const char* value = std::getenv("KILN_CUDA_CACHING_ALLOCATOR");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

std::vector<CudaCachingAllocator*>& device_allocators() {
  // Never destroyed, as the CPU allocator: tensors held by static objects may be freed after
  // exit-time destructors would have run, and the CUDA runtime may be gone by then anyway.
  static auto* all = [] {
    auto* allocators = new std::vector<CudaCachingAllocator*>;
    bool caching = caching_enabled();
    for (int i = 0; i < device_count(); ++i)
      allocators->push_back(new CudaCachingAllocator(i, caching));
    return allocators;
  }();
  return *all;
}

}  // namespace

Allocator& allocator(int index) {
  auto& allocators = device_allocators();
  KILN_CHECK(index >= 0 && index < static_cast<int>(allocators.size()), DeviceError,
             "cuda::allocator: no device cuda:{} ({} visible)", index, allocators.size());
  return *allocators[static_cast<size_t>(index)];
}

void record_stream(const Tensor& tensor, const Stream& stream) {
  KILN_CHECK(tensor.defined() && tensor.device().is_cuda(), DeviceError,
             "cuda::record_stream: expected a CUDA tensor, got {}", describe(tensor));
  KILN_CHECK(stream.device() == tensor.device().index, DeviceError,
             "cuda::record_stream: the stream is on cuda:{}, the tensor {}", stream.device(),
             describe(tensor));
  auto* owner = dynamic_cast<CudaCachingAllocator*>(&tensor.storage()->allocator());
  KILN_CHECK(owner != nullptr, ValueError,
             "cuda::record_stream: the memory of {} does not come from kiln's caching allocator",
             describe(tensor));
  owner->record_stream(tensor.storage()->data(), stream.handle());
}

void empty_cache() {
  const OpNameScope name("cuda::empty_cache");
  check_not_capturing("gives cached memory back with cudaFree, which waits for the GPU,");
  for (CudaCachingAllocator* allocator : device_allocators()) allocator->empty_cache();
}

namespace {
CudaCachingAllocator& device_allocator(int device) {
  return *device_allocators().at(static_cast<size_t>(device));
}
}  // namespace

bool detail::caching_allocator_enabled() {
  return caching_enabled();
}
void detail::begin_allocate_to_pool(int device, uint64_t pool, uint64_t capture) {
  device_allocator(device).pool().begin_allocate_to_pool(pool, capture);
}
void detail::end_allocate_to_pool(int device, uint64_t pool) {
  device_allocator(device).pool().end_allocate_to_pool(pool);
}
void detail::release_pool(int device, uint64_t pool) {
  device_allocator(device).pool().release_pool(pool);
}
CachingAllocator::PoolStats detail::pool_stats(int device, uint64_t pool) {
  return device_allocator(device).pool().pool_stats(pool);
}

int64_t memory_allocated(int device) {
  return allocator(detail::resolve("cuda::memory_allocated", device)).stats().current_bytes;
}
int64_t memory_reserved(int device) {
  return allocator(detail::resolve("cuda::memory_reserved", device)).stats().reserved_bytes;
}
int64_t max_memory_allocated(int device) {
  return allocator(detail::resolve("cuda::max_memory_allocated", device)).stats().peak_bytes;
}
int64_t max_memory_reserved(int device) {
  return allocator(detail::resolve("cuda::max_memory_reserved", device))
      .stats()
      .peak_reserved_bytes;
}

}  // namespace kiln::cuda
