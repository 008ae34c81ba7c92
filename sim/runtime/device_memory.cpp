#include "kiln/sim/runtime/device_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <iterator>
#include <mutex>
#include <new>

#include "kiln/sim/grid.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define KILN_SIM_POISON(address, bytes) ASAN_POISON_MEMORY_REGION(address, bytes)
#define KILN_SIM_UNPOISON(address, bytes) ASAN_UNPOISON_MEMORY_REGION(address, bytes)
#else
#define KILN_SIM_POISON(address, bytes) ((void)(address), (void)(bytes))
#define KILN_SIM_UNPOISON(address, bytes) ((void)(address), (void)(bytes))
#endif

namespace kiln::sim::runtime {

DeviceMemory::DeviceMemory(std::size_t bytes)
    : bytes_(bytes), page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {
  void* range =
      mmap(nullptr, bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) throw std::bad_alloc();
  base_ = static_cast<char*>(range);
  free_[0] = bytes_;
}

DeviceMemory::~DeviceMemory() {
  munmap(base_, bytes_);
}

void* DeviceMemory::allocate(std::size_t bytes) {
  const bool poison = schedule().poison_allocations;
  const std::size_t pages = (bytes + page_ - 1) / page_ * page_;
  const std::size_t span = pages + page_;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < span) continue;
    const std::size_t offset = it->first, left = it->second - span;
    free_.erase(it);
    if (left > 0) free_[offset + span] = left;
    char* p = base_ + offset;
    if (pages > 0 && mprotect(p, pages, PROT_READ | PROT_WRITE) != 0) {
      free_[offset] = span;
      return nullptr;
    }
    KILN_SIM_UNPOISON(p, bytes);
    KILN_SIM_POISON(p + bytes, pages - bytes);
    if (poison) std::memset(p, 0xFF, bytes);
    live_[offset] = {bytes, span};
    used_ += bytes;
    return p;
  }
  return nullptr;
}

bool DeviceMemory::release(const void* pointer) {
  if (!contains(pointer)) return false;
  const std::size_t offset = static_cast<std::size_t>(static_cast<const char*>(pointer) - base_);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_.find(offset);
  if (it == live_.end()) return false;
  const Allocation allocation = it->second;
  live_.erase(it);
  used_ -= allocation.bytes;
  char* p = base_ + offset;
  const std::size_t pages = allocation.span - page_;
  KILN_SIM_POISON(p, pages);
  if (pages > 0) {
    madvise(p, pages, MADV_DONTNEED);
    mprotect(p, pages, PROT_NONE);
  }
  // Give the span back, merged with free neighbours.
  std::size_t start = offset, span = allocation.span;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == offset + span) {
    span += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    const auto before = std::prev(next);
    if (before->first + before->second == start) {
      start = before->first;
      span += before->second;
      free_.erase(before);
    }
  }
  free_[start] = span;
  return true;
}

bool DeviceMemory::within_allocation(const void* pointer, std::size_t bytes) const {
  if (!contains(pointer)) return false;
  const std::size_t offset = static_cast<std::size_t>(static_cast<const char*>(pointer) - base_);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.upper_bound(offset);
  if (it == live_.begin()) return false;
  --it;
  return offset + bytes <= it->first + it->second.bytes;
}

std::size_t DeviceMemory::used() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return used_;
}

}  // namespace kiln::sim::runtime
