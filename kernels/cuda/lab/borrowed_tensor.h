// A Tensor over device memory the lab's caller owns. The lab's Args carry raw pointers (a version
// is a kernel and its launcher, nothing more), but version 0 of softmax and layer norm is kiln's
// own op kernel, which takes Tensors: these wrap the pointers without copying, and free nothing.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "kiln/core/allocator.h"
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/shape.h"
#include "kiln/core/storage.h"
#include "kiln/core/tensor.h"

namespace kiln::lab {

// Hands out one existing block once, as Storage's constructor asks for it, and never frees it.
class BorrowedAllocator final : public Allocator {
 public:
  BorrowedAllocator(void* data, Device device) : data_(data), device_(device) {}
  void* allocate(size_t) override { return data_; }
  void deallocate(void*, size_t) override {}
  Device device() const override { return device_; }

 private:
  void* data_;
  Device device_;
};

// A contiguous tensor of `shape` and `dtype` over `data` on `device`; `data` must outlive it.
inline Tensor borrow_tensor(const void* data, const Shape& shape, DType dtype, Device device) {
  auto* allocator = new BorrowedAllocator(const_cast<void*>(data), device);
  std::shared_ptr<Storage> storage(
      new Storage(static_cast<size_t>(shape_numel(shape, "borrow_tensor")) * dtype_size(dtype),
                  *allocator),
      [allocator](Storage* s) {
        delete s;  // its destructor gives the block back to the allocator, which keeps it
        delete allocator;
      });
  return make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

}  // namespace kiln::lab
