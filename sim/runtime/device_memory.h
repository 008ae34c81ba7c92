// One simulated device's memory: a reserved address range (inaccessible until allocated), handed
// out in whole pages, 256-byte aligned as cudaMalloc's, with an inaccessible page after each
// allocation and freed pages made inaccessible again, so a stray access faults. Under
// AddressSanitizer the bytes between an allocation's end and its page's end are poisoned too, so
// an access one element past the end is reported where it happens. A fresh allocation holds 0xFF
// bytes (Schedule::poison_allocations, sim/grid.h), as a GPU's holds what was there before.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

namespace kiln::sim::runtime {

class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  bool contains(const void* pointer) const {
    const char* p = static_cast<const char*>(pointer);
    return p >= base_ && p < base_ + bytes_;
  }
  void* allocate(std::size_t bytes);  // nullptr when no range is free
  bool release(const void* pointer);
  bool within_allocation(const void* pointer, std::size_t bytes) const;
  std::size_t used() const;

 private:
  struct Allocation {
    std::size_t bytes;  // asked for
    std::size_t span;   // taken: whole pages and the guard page
  };
  char* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t page_ = 0;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::size_t> free_;  // offset -> bytes
  std::map<std::size_t, Allocation> live_;   // offset -> allocation
  std::size_t used_ = 0;
};

}  // namespace kiln::sim::runtime
