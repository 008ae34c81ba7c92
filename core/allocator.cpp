#include "kiln/core/allocator.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <list>
#include <mutex>

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

// Blocks of 32 MiB and more: glibc maps each one anew and unmaps it when freed (its mmap
// threshold goes no higher), so every call that makes such a tensor page-faults all of it in
// again, at about 0.1 ms a MiB (ResNet-50's activations at batch 16 reach 50 MiB). Freed ones
// are kept instead, by size rounded up to a MiB, for the next allocation of that size: a training
// step frees and makes the same ones every step. At most kCachedBytes are kept; past that the
// oldest go back to the system.
class LargeBlocks {
 public:
  static constexpr size_t kLarge = size_t{32} << 20;
  static constexpr size_t kGranule = size_t{1} << 20;
  static constexpr size_t kCachedBytes = size_t{2} << 30;

  static size_t rounded(size_t nbytes) { return (nbytes + kGranule - 1) / kGranule * kGranule; }

  // A kept block of exactly `size` bytes, or null.
  void* take(size_t size) {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (it->size == size) {
        void* ptr = it->ptr;
        blocks_.erase(it);
        held_ -= size;
        return ptr;
      }
    return nullptr;
  }

  void keep(void* ptr, size_t size) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (size > kCachedBytes) {
      std::free(ptr);
      return;
    }
    while (held_ + size > kCachedBytes) {
      std::free(blocks_.front().ptr);
      held_ -= blocks_.front().size;
      blocks_.pop_front();
    }
    blocks_.push_back({ptr, size});
    held_ += size;
  }

  // Gives every kept block back to the system.
  void release() {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const Block& b : blocks_) std::free(b.ptr);
    blocks_.clear();
    held_ = 0;
  }

  int64_t held() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(held_);
  }

 private:
  struct Block {
    void* ptr;
    size_t size;
  };
  mutable std::mutex mutex_;
  std::list<Block> blocks_;  // oldest first; guarded by mutex_
  size_t held_ = 0;          // guarded by mutex_
};

class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() {
#if defined(__GLIBC__)
    // glibc serves blocks past its mmap threshold (128 KiB at first, raised as such blocks are
    // freed) with fresh mappings, and hands the top of its heap back to the system once 128 KiB
    // or more of it is free: either way some of a training step's activations, freed and
    // allocated again every step, page-fault in anew each time (about 1,500 faults, 6 MB, per
    // ResNet-20 step at batch 128). Blocks below 32 MiB (glibc's largest threshold) now come from
    // the heap and stay in the process for the next step: no fault after the first step; larger
    // ones are kept by LargeBlocks.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  }

  // The size of the block that holds nbytes: whole lines, whole MiB for large blocks. Zero-size
  // tensors get a real (one-line) block too, so that no kernel ever hands a null pointer to
  // memcpy and friends, whose behaviour with null is undefined even for 0 bytes.
  static size_t block_size(size_t nbytes) {
    const size_t lines =
        std::max<size_t>((nbytes + kAlignment - 1) / kAlignment * kAlignment, kAlignment);
    return lines >= LargeBlocks::kLarge ? LargeBlocks::rounded(lines) : lines;
  }

  void* allocate(size_t nbytes) override {
    const size_t rounded = block_size(nbytes);
    void* ptr = rounded >= LargeBlocks::kLarge ? large_.take(rounded) : nullptr;
    if (ptr == nullptr) ptr = std::aligned_alloc(kAlignment, rounded);
    if (ptr == nullptr && large_.held() > 0) {
      large_.release();
      ptr = std::aligned_alloc(kAlignment, rounded);
    }
    KILN_CHECK(ptr != nullptr, OutOfMemoryError,
               "cpu allocator: out of memory allocating {} bytes ({} bytes held by kiln)", nbytes,
               stats().current_bytes);
    record_allocate(nbytes);
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    const size_t rounded = block_size(nbytes);
    if (rounded >= LargeBlocks::kLarge)
      large_.keep(ptr, rounded);
    else
      std::free(ptr);
    record_free(nbytes);
  }
  Device device() const override {
    return Device::cpu();
  }
  MemoryStats stats() const override {
    MemoryStats stats = Allocator::stats();
    stats.reserved_bytes += large_.held();
    stats.peak_reserved_bytes = std::max(stats.peak_reserved_bytes, stats.reserved_bytes);
    return stats;
  }

 private:
  static constexpr size_t kAlignment = 64;
  LargeBlocks large_;
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
