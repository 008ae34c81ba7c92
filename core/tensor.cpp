// Tensor's fields and accessors, and the allocation of new tensors. What computes (conversions,
// copies, views, arithmetic) is defined on the ops floor: ops/copy.cpp, ops/views.cpp,
// ops/tensor_methods.cpp, ops/autograd/tensor_autograd.cpp.
#include "kiln/core/tensor.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/cuda.h"

namespace kiln {

AutogradMeta& TensorImpl::autograd_meta() {
  if (!autograd) autograd = std::make_unique<AutogradMeta>();
  return *autograd;
}

namespace {
const TensorImpl& checked(const std::shared_ptr<TensorImpl>& impl) {
  KILN_CHECK(impl != nullptr, ValueError, "Tensor: use of an undefined tensor");
  return *impl;
}
}  // namespace

const Shape& Tensor::shape() const {
  return checked(impl_).shape;
}
const Shape& Tensor::strides() const {
  return checked(impl_).strides;
}
int64_t Tensor::dim() const {
  return static_cast<int64_t>(shape().size());
}
int64_t Tensor::size(int64_t d) const {
  return shape()[wrap_dim("size", d, dim())];
}
int64_t Tensor::stride(int64_t d) const {
  return strides()[wrap_dim("stride", d, dim())];
}
int64_t Tensor::numel() const {
  return shape_numel(shape());
}
int64_t Tensor::offset() const {
  return checked(impl_).offset;
}
DType Tensor::dtype() const {
  return checked(impl_).dtype;
}
Device Tensor::device() const {
  return checked(impl_).storage->device();
}
size_t Tensor::element_size() const {
  return dtype_size(dtype());
}
const std::shared_ptr<Storage>& Tensor::storage() const {
  return checked(impl_).storage;
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;
  const Shape& s = shape();
  const Shape& st = strides();
  int64_t expected = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= s[i];
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::contiguous) return is_contiguous();
  return format == MemoryFormat::channels_last && is_dense_in(shape(), strides(), format);
}

MemoryFormat Tensor::suggest_memory_format() const {
  return is_channels_last_strides(shape(), strides()) ? MemoryFormat::channels_last
                                                      : MemoryFormat::contiguous;
}

void* Tensor::data_ptr() const {
  const TensorImpl& impl = checked(impl_);
  char* base = static_cast<char*>(impl.storage->data());
  return base ? base + impl.offset * static_cast<int64_t>(dtype_size(impl.dtype)) : nullptr;
}

Tensor make_tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
                   DType dtype) {
  // Every tensor, views included, passes here: an element count that overflows is refused once,
  // so numel() and every product of a tensor's sizes can be trusted downstream.
  shape_numel(shape, "make_tensor");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// The bytes a contiguous tensor of `shape` takes; ShapeError naming `op` when they (or the element
// count) overflow int64, before anything is allocated.
size_t tensor_nbytes(const char* op, const Shape& shape, DType dtype) {
  check_shape(op, shape);
  const int64_t numel = shape_numel(shape, op);
  return static_cast<size_t>(checked_mul(op, "the byte size of the tensor", numel,
                                         static_cast<int64_t>(dtype_size(dtype))));
}

Tensor empty(const Shape& shape, DType dtype, Device device) {
  size_t nbytes = tensor_nbytes("empty", shape, dtype);
  auto storage = std::make_shared<Storage>(nbytes, allocator_for(device));
  return make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor empty(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  Shape strides = strides_for("empty", shape, format);
  size_t nbytes = tensor_nbytes("empty", shape, dtype);
  auto storage = std::make_shared<Storage>(nbytes, allocator_for(device));
  return make_tensor(std::move(storage), shape, std::move(strides), 0, dtype);
}

bool dense_format(const Tensor& t, MemoryFormat* format) {
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    if (t.is_contiguous(f)) {
      *format = f;
      return true;
    }
  }
  return false;
}

bool same_dense_layout(const Tensor& a, const Tensor& b) {
  MemoryFormat fa = MemoryFormat::contiguous, fb = MemoryFormat::contiguous;
  if (a.shape() != b.shape() || !dense_format(a, &fa) || !dense_format(b, &fb)) return false;
  return fa == fb || a.is_contiguous(fb) || b.is_contiguous(fa);
}

Tensor empty_like_layout(const Tensor& like, DType dtype, Device device) {
  return empty(like.shape(), dtype, device, like.suggest_memory_format());
}

Tensor empty_pinned(const Shape& shape, DType dtype) {
  size_t nbytes = tensor_nbytes("empty_pinned", shape, dtype);
  auto storage = std::make_shared<Storage>(nbytes, cuda::pinned_allocator());
  return make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

bool Tensor::is_pinned() const {
  return storage()->allocator().is_pinned();
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return fmt::format("{} {} {}", shape_str(t.shape()), dtype_name(t.dtype()), t.device().str());
}

}  // namespace kiln
