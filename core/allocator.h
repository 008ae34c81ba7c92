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
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Never returns null for nbytes > 0: throws OutOfMemoryError instead.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;

  MemoryStats stats() const;
  void reset_peak();

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
