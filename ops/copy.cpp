// Conversions and copies: to(dtype), to(device), clone, contiguous, pin_memory, copy_, fill_, and
// reading values back (item, tolist), each with its backward node.
#include "kiln/kernels/copy.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/cuda.h"
#include "kiln/core/op_name.h"
#include "kiln/core/profiler.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/memory_order.h"
#include "kiln/ops/reduce.h"

namespace kiln {

// ---- copies between dtypes and devices ----

namespace {

// Copies src (already of dst's shape) into dst, across dtypes and devices. On one device the
// device's kernel does it all (strides, broadcasting, casts). Across devices the bytes move as one
// dense block in src's dtype (contiguous or channels-last): gathered on the source side if src is
// strided otherwise, then cast and scattered into dst by the destination's kernel unless dst
// takes the block as it is.
void copy_any(const Tensor& src, const Tensor& dst) {
  if (src.numel() == 0) return;
  if (src.device() == dst.device()) {
    const MemoryFormat format = result_format(dst.shape(), {&dst});
    kernels_for<CopyKernels>("copy", dst.device())
        .copy(in_memory_order(src, format), in_memory_order(dst, format));
    return;
  }
  Tensor block = src;
  MemoryFormat format = MemoryFormat::contiguous;
  if (!dense_format(src, &format)) {
    block = empty(src.shape(), src.dtype(), src.device());
    copy_any(src, block);
  }
  const bool direct = dst.is_contiguous(format) && dst.dtype() == src.dtype();
  Tensor landing = direct ? dst : empty(src.shape(), src.dtype(), dst.device(), format);
  cuda::copy_bytes(landing.data_ptr(), landing.device(), block.data_ptr(), block.device(),
                   block.numel() * block.element_size());
  if (!direct) copy_any(landing, dst);
}

struct ToDTypeBackward : Node {
  bool differentiable_backward() const override { return true; }
  DType input_dtype;
  std::string name() const override { return "ToDTypeBackward"; }
  // It saves nothing, so it can run in any number of backward passes: autocast's cache hands the
  // same cast weight (and this node) to every forward of a scope, gradient accumulation included.
  bool is_reusable() const override { return true; }
  std::vector<Tensor> apply(const Tensor& grad) override { return {grad.to(input_dtype)}; }
};

struct ToDeviceBackward : Node {
  bool differentiable_backward() const override { return true; }
  Device input_device;
  std::string name() const override { return "ToDeviceBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override { return {grad.to(input_device)}; }
};

struct CloneBackward : Node {
  bool differentiable_backward() const override { return true; }
  std::string name() const override { return "CloneBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override { return {grad}; }
};

}  // namespace

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  profiler::OpScope profile("to", {this});
  Tensor out = empty_like_layout(*this, target, device());
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
  profiler::OpScope profile("to", {this});
  Tensor out = empty_like_layout(*this, dtype(), target);
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
  MemoryFormat format = MemoryFormat::contiguous;
  if (!non_blocking || !target.is_cuda() || !device().is_cpu() || !is_pinned() ||
      !dense_format(*this, &format) || numel() == 0)
    return to(target);
  profiler::OpScope profile("to", {this});
  Tensor out = empty(shape(), dtype(), target, format);
  cuda::copy_bytes_async(out.data_ptr(), target, data_ptr(), device(), numel() * element_size());
  if (should_record({this})) {
    auto node = std::make_shared<ToDeviceBackward>();
    node->input_device = device();
    record(out, node, {this});
  }
  return out;
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
  return clone(MemoryFormat::preserve);
}

Tensor Tensor::clone(MemoryFormat format) const {
  if (format == MemoryFormat::preserve) format = suggest_memory_format();
  profiler::OpScope profile("clone", {this});
  KILN_CHECK(format != MemoryFormat::channels_last || dim() == 4, ShapeError,
             "clone: channels_last is a layout of 4-D [N, C, H, W] tensors, got {}",
             describe(*this));
  Tensor out = empty(shape(), dtype(), device(), format);
  copy_any(*this, out);
  if (should_record({this})) record(out, std::make_shared<CloneBackward>(), {this});
  return out;
}

Tensor Tensor::contiguous() const {
  return contiguous(MemoryFormat::contiguous);
}

Tensor Tensor::contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::preserve) return *this;
  return is_contiguous(format) ? *this : clone(format);
}

Tensor Tensor::to(MemoryFormat format) const {
  if (format == MemoryFormat::preserve || suggest_memory_format() == format) return *this;
  return clone(format);
}

double item_as_double(const Tensor& t) {
  const OpNameScope name("item");
  KILN_CHECK(t.numel() == 1, ValueError, "item: expected a tensor with one element, got shape {}",
             shape_str(t.shape()));
  Tensor host = t.to(Device::cpu());
  return visit_dtype(host.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return convert<double>(*static_cast<const T*>(host.data_ptr()));
  });
}

std::vector<double> Tensor::tolist() const {
  const OpNameScope name("tolist");
  Tensor host = to(Device::cpu()).to(DType::f64).contiguous();
  const double* p = static_cast<const double*>(host.data_ptr());
  return std::vector<double>(p, p + host.numel());
}

// ---- copy_ and fill_ ----

namespace {
struct CopyBackward : Node {
  bool differentiable_backward() const override { return true; }
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
  bool differentiable_backward() const override { return true; }
  std::string name() const override { return "FillBackward"; }
  std::vector<Tensor> apply(const Tensor&) override { return {Tensor()}; }
};
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  profiler::OpScope profile("copy_", {this, &src});
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
  kernels_for<CopyKernels>("fill", device()).fill(*this, value);
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
