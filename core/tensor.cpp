// Tensor metadata, storage access, conversions and copies. Views live in core/views.cpp, autograd
// methods in core/autograd/tensor_autograd.cpp.
#include "kiln/core/tensor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/autograd/node.h"
#include "kiln/core/cuda.h"
#include "kiln/core/factories.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/kernels/cpu/copy.h"
#include "kiln/kernels/cuda/copy.h"

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

Tensor empty_pinned(const Shape& shape, DType dtype) {
  size_t nbytes = tensor_nbytes("empty_pinned", shape, dtype);
  auto storage = std::make_shared<Storage>(nbytes, cuda::pinned_allocator());
  return make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

// ---- copies between dtypes and devices ----

namespace {

// Copies src (already of dst's shape) into dst, across dtypes and devices. On one device the
// device's kernel does it all (strides, broadcasting, casts). Across devices the bytes move as one
// contiguous block in src's dtype: gathered on the source side if src is strided, then cast and
// scattered into dst by the destination's kernel unless dst takes the block as it is.
void copy_any(const Tensor& src, const Tensor& dst) {
  if (src.numel() == 0) return;
  if (src.device() == dst.device()) {
    if (dst.device().is_cuda())
      gpu::copy(src, dst);
    else
      cpu::copy(src, dst);
    return;
  }
  Tensor block = src;
  if (!src.is_contiguous()) {
    block = empty(src.shape(), src.dtype(), src.device());
    copy_any(src, block);
  }
  const bool direct = dst.is_contiguous() && dst.dtype() == src.dtype();
  Tensor landing = direct ? dst : empty(src.shape(), src.dtype(), dst.device());
  cuda::copy_bytes(landing.data_ptr(), landing.device(), block.data_ptr(), block.device(),
                   block.numel() * block.element_size());
  if (!direct) copy_any(landing, dst);
}

struct ToDTypeBackward : Node {
  DType input_dtype;
  std::string name() const override { return "ToDTypeBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override { return {grad.to(input_dtype)}; }
};

struct ToDeviceBackward : Node {
  Device input_device;
  std::string name() const override { return "ToDeviceBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override { return {grad.to(input_device)}; }
};

struct CloneBackward : Node {
  std::string name() const override { return "CloneBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override { return {grad}; }
};

}  // namespace

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), target, device());
  copy_any(*this, out);
  if (should_record({this})) {
    KILN_CHECK(is_floating(target), AutogradError,
               "to: cannot convert a tensor that requires grad to {} (only floating dtypes carry "
               "gradients); detach() it first",
               dtype_name(target));
    auto node = std::make_shared<ToDTypeBackward>();
    node->input_dtype = dtype();
    record(out, node, {this});
  }
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor out = empty(shape(), dtype(), target);
  copy_any(*this, out);
  if (should_record({this})) {
    auto node = std::make_shared<ToDeviceBackward>();
    node->input_device = device();
    record(out, node, {this});
  }
  return out;
}

Tensor Tensor::to(Device target, bool non_blocking) const {
  // Only pinned memory can be read by the GPU while the host goes on; any other copy is done when
  // to(target) returns, which is as fast as it gets for it.
  if (!non_blocking || !target.is_cuda() || !device().is_cpu() || !is_pinned() ||
      !is_contiguous() || numel() == 0)
    return to(target);
  Tensor out = empty(shape(), dtype(), target);
  cuda::copy_bytes_async(out.data_ptr(), target, data_ptr(), device(), numel() * element_size());
  if (should_record({this})) {
    auto node = std::make_shared<ToDeviceBackward>();
    node->input_device = device();
    record(out, node, {this});
  }
  return out;
}

bool Tensor::is_pinned() const {
  return storage()->allocator().is_pinned();
}

Tensor Tensor::pin_memory() const {
  KILN_CHECK(device().is_cpu(), DeviceError,
             "pin_memory: only CPU tensors can be pinned, got a {} tensor", device().str());
  if (is_pinned()) return *this;
  Tensor out = empty_pinned(shape(), dtype());
  copy_any(*this, out);
  if (should_record({this})) record(out, std::make_shared<CloneBackward>(), {this});
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  copy_any(*this, out);
  if (should_record({this})) record(out, std::make_shared<CloneBackward>(), {this});
  return out;
}

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}

double item_as_double(const Tensor& t) {
  KILN_CHECK(t.numel() == 1, ValueError, "item: expected a tensor with one element, got shape {}",
             shape_str(t.shape()));
  Tensor host = t.to(Device::cpu());
  return visit_dtype(host.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return convert<double>(*static_cast<const T*>(host.data_ptr()));
  });
}

std::vector<double> Tensor::tolist() const {
  Tensor host = to(Device::cpu()).to(DType::f64).contiguous();
  const double* p = static_cast<const double*>(host.data_ptr());
  return std::vector<double>(p, p + host.numel());
}

// ---- copy_ and fill_ ----

namespace {
struct CopyBackward : Node {
  Shape src_shape;
  DType src_dtype;
  Device src_device;
  std::string name() const override { return "CopyBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override {
    // The old contents of self are overwritten, so they get no gradient (the empty first slot).
    return {Tensor(), sum_to(grad, src_shape).to(src_dtype).to(src_device)};
  }
};

// fill_ on a tensor with history: the filled values depend on nothing, so the old history gets no
// gradient, but the tensor still requires grad, as in PyTorch (FillBackward0).
struct FillBackward : Node {
  std::string name() const override { return "FillBackward"; }
  std::vector<Tensor> apply(const Tensor&) override { return {Tensor()}; }
};
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  bool recording = should_record({this, &src});
  if (recording) check_inplace("copy_", *this);
  KILN_CHECK(!recording || !impl()->is_view || requires_grad(), AutogradError,
             "copy_: copying a tensor that requires grad into a view is not supported; build the "
             "result with cat/stack or out-of-place ops instead");
  broadcast_shapes("copy_", shape(), src.shape());
  Shape src_shape = src.shape();
  Tensor expanded = src;
  if (src.shape() != shape()) {
    NoGradGuard no_grad;
    expanded = src.expand(shape());
  }
  if (expanded.storage() == storage() && !expanded.is_same(*this))
    expanded = expanded.detach().clone();
  copy_any(expanded, *this);
  storage()->bump_version();
  if (recording) {
    auto node = std::make_shared<CopyBackward>();
    node->src_shape = src_shape;
    node->src_dtype = src.dtype();
    node->src_device = src.device();
    Tensor self = *this;
    record(self, node, {static_cast<const Tensor*>(nullptr), &src});
  }
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace("fill_", *this);
  if (device().is_cuda())
    gpu::fill(*this, value);
  else
    cpu::fill(*this, value);
  storage()->bump_version();
  if (requires_grad() && GradMode::is_enabled()) {
    Tensor self = *this;
    record(self, std::make_shared<FillBackward>(), {&self});
  }
  return *this;
}

Tensor& Tensor::zero_() {
  return fill_(0.0);
}

}  // namespace kiln
