// What the CUDA simulator's library stand-ins (conv2d.cpp, matmul.cpp here) hand to
// sim::library_call: on a capturing stream the call runs at each launch of the graph, long after
// the op returned and its temporaries were freed into the graph's memory pool, which keeps the
// memory itself. So the deferred call holds borrowed views (the same bytes, shape, strides and
// dtype, not owning the memory) rather than the tensors, and freeing a tensor during the capture
// lets the pool reuse its block, as it does on a GPU.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "kiln/core/allocator.h"
#include "kiln/core/device.h"
#include "kiln/core/storage.h"
#include "kiln/core/tensor.h"

namespace kiln::sim_library {

class Borrowed {
 public:
  explicit Borrowed(const Tensor& t) {
    if (!t.defined()) return;
    memory_ = std::make_shared<Memory>(t.storage()->data(), t.device());
    auto storage = std::make_shared<Storage>(t.storage()->nbytes(), *memory_);
    tensor_ = make_tensor(std::move(storage), t.shape(), t.strides(), t.offset(), t.dtype());
  }
  const Tensor& operator*() const { return tensor_; }

 private:
  // Hands out the one address it was made with and frees nothing.
  class Memory final : public Allocator {
   public:
    Memory(void* data, Device device) : data_(data), device_(device) {}
    void* allocate(std::size_t) override { return data_; }
    void deallocate(void*, std::size_t) override {}
    Device device() const override { return device_; }

   private:
    void* data_;
    Device device_;
  };
  std::shared_ptr<Memory> memory_;  // declared first: the tensor's Storage goes before it
  Tensor tensor_;
};

}  // namespace kiln::sim_library
