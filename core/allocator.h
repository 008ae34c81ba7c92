// Allocator: the interface every memory source implements (CPU, and CUDA when built with it), with
// the statistics a user asks for (current, peak, number of allocations).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "kiln/core/device.h"

namespace kiln {

struct MemoryStats {
  int64_t current_bytes = 0;     // bytes held by live tensors
  int64_t peak_bytes = 0;        // the most current_bytes has been since the last reset
  int64_t allocations = 0;       // number of allocate() calls since start
  int64_t live_allocations = 0;  // allocations not yet freed
  // What the allocator holds from the system or the driver: live blocks plus its cache. A caching
  // (CUDA) allocator counts current_bytes in whole blocks (rounded sizes), as PyTorch does; the CPU
  // allocator keeps only freed blocks of 32 MiB and more (up to 2 GiB of them), which its
  // reserved_bytes adds to current_bytes; its device_allocs count allocations.
  int64_t reserved_bytes = 0;
  int64_t peak_reserved_bytes = 0;  // the most reserved_bytes has been since the last reset
  int64_t device_allocs = 0;        // calls to the system allocator (cudaMalloc) since start
  int64_t device_frees = 0;         // memory given back to it (cudaFree) since start
  int64_t alloc_retries = 0;        // allocations that emptied the cache and retried after OOM
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Never returns null for nbytes > 0: throws OutOfMemoryError instead.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;

  virtual MemoryStats stats() const;
  virtual void reset_peak();
  // Page-locked host memory (cuda::pinned_allocator), which the GPU can copy from asynchronously.
  virtual bool is_pinned() const { return false; }

 protected:
  void record_allocate(size_t nbytes);
  void record_free(size_t nbytes);

 private:
  std::atomic<int64_t> current_{0}, peak_{0}, allocations_{0}, live_{0};
};

// 64-byte aligned host memory: a cache line, and the widest AVX-512 load.
Allocator& cpu_allocator();
// The allocator for any device (throws DeviceError for a CUDA device when kiln has no CUDA).
Allocator& allocator_for(Device device);

MemoryStats memory_stats(Device device = Device::cpu());
void reset_peak_memory_stats(Device device = Device::cpu());

}  // namespace kiln
