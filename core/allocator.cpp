#include "kiln/core/allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "kiln/core/cuda.h"
#include "kiln/core/error.h"
#include "kiln/core/profiler.h"

namespace kiln {

MemoryStats Allocator::stats() const {
  MemoryStats stats;
  stats.current_bytes = current_.load();
  stats.peak_bytes = peak_.load();
  stats.allocations = allocations_.load();
  stats.live_allocations = live_.load();
  stats.reserved_bytes = stats.current_bytes;
  stats.peak_reserved_bytes = stats.peak_bytes;
  stats.device_allocs = stats.allocations;
  stats.device_frees = stats.allocations - stats.live_allocations;
  return stats;
}

void Allocator::reset_peak() {
  peak_.store(current_.load());
}

void Allocator::record_allocate(size_t nbytes) {
  int64_t now = current_.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  allocations_.fetch_add(1);
  live_.fetch_add(1);
  profiler::on_allocate(static_cast<int64_t>(nbytes));
}

void Allocator::record_free(size_t nbytes) {
  current_.fetch_sub(static_cast<int64_t>(nbytes));
  live_.fetch_sub(1);
  profiler::on_free(static_cast<int64_t>(nbytes));
}

namespace {

class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() {
#if defined(__GLIBC__)
    // glibc serves blocks past its mmap threshold (128 KiB at first, raised as such blocks are
    // freed) with fresh mappings, and hands the top of its heap back to the system once 128 KiB
    // or more of it is free: either way some of a training step's activations, freed and
    // allocated again every step, page-fault in anew each time (about 1,500 faults, 6 MB, per
    // ResNet-20 step at batch 128). Blocks below 32 MiB (glibc's largest threshold) now come from
    // the heap and stay in the process for the next step: no fault after the first step.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  }

  void* allocate(size_t nbytes) override {
    constexpr size_t kAlignment = 64;
    // Zero-size tensors get a real (one-line) block too, so that no kernel ever hands a null
    // pointer to memcpy and friends, whose behaviour with null is undefined even for 0 bytes.
    size_t rounded =
        std::max<size_t>((nbytes + kAlignment - 1) / kAlignment * kAlignment, kAlignment);
    void* ptr = std::aligned_alloc(kAlignment, rounded);
    KILN_CHECK(ptr != nullptr, OutOfMemoryError,
               "cpu allocator: out of memory allocating {} bytes ({} bytes held by kiln)", nbytes,
               stats().current_bytes);
    record_allocate(nbytes);
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    std::free(ptr);
    record_free(nbytes);
  }
  Device device() const override {
    return Device::cpu();
  }
};

}  // namespace

Allocator& cpu_allocator() {
  // Never destroyed: tensors held by other static objects may be freed after it otherwise would be.
  static CpuAllocator* allocator = new CpuAllocator;
  return *allocator;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  return cuda::allocator(device.index);
}

MemoryStats memory_stats(Device device) {
  return allocator_for(device).stats();
}
void reset_peak_memory_stats(Device device) {
  allocator_for(device).reset_peak();
}

}  // namespace kiln
