// Storage: one allocation shared by a tensor and all its views. The version counter lives here,
// so an in-place change through any view is seen by every tensor autograd saved from the same data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kiln/core/allocator.h"

namespace kiln {

class Storage {
 public:
  Storage(size_t nbytes, Allocator& allocator)
      : data_(allocator.allocate(nbytes)), nbytes_(nbytes), allocator_(&allocator) {}
  ~Storage() { allocator_->deallocate(data_, nbytes_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return allocator_->device(); }
  // Which allocator owns the memory: it frees it, and says whether it is pinned.
  Allocator& allocator() const { return *allocator_; }

  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_;
  size_t nbytes_;
  Allocator* allocator_;
  uint64_t version_ = 0;
};

}  // namespace kiln
