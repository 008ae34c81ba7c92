// In-place ops. Without autograd they write straight into self's storage. With autograd they
// compute the out-of-place result from a clone of self (so the old value a node saved stays
// intact), write it into self and hand self the result's history.
#include <initializer_list>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/profiler.h"
#include "kiln/kernels/elementwise.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/memory_order.h"

namespace kiln {

namespace {

template <class F>
Tensor& inplace(const char* op, Tensor& self, std::initializer_list<const Tensor*> others,
                F compute) {
  profiler::OpScope profile(op, {&self});
  require_defined(op, self, "self");
  std::vector<const Tensor*> all = {&self};
  all.insert(all.end(), others.begin(), others.end());
  bool recording = GradMode::is_enabled();
  bool any = false;
  for (const Tensor* t : all) any = any || (t && t->defined() && t->requires_grad());
  recording = recording && any;
  if (recording) {
    check_inplace(op, self);
    KILN_CHECK(!self.impl()->is_view, AutogradError,
               "{}: in-place operation on a view while autograd records it is not supported; use "
               "the out-of-place form",
               op);
    Tensor result = compute(self.clone());
    KILN_CHECK(result.shape() == self.shape(), ShapeError,
               "{}: result shape {} does not match self {} (in-place ops cannot broadcast self)",
               op, shape_str(result.shape()), shape_str(self.shape()));
    {
      NoGradGuard no_grad;
      self.copy_(result);
    }
    AutogradMeta& meta = self.impl()->autograd_meta();
    meta.grad_fn = result.grad_fn();
    meta.requires_grad = false;
    return self;
  }
  Tensor result;
  {
    NoGradGuard no_grad;
    result = compute(self);
  }
  KILN_CHECK(result.shape() == self.shape(), ShapeError,
             "{}: result shape {} does not match self {} (in-place ops cannot broadcast self)", op,
             shape_str(result.shape()), shape_str(self.shape()));
  KILN_CHECK(is_floating(self.dtype()) || !is_floating(result.dtype()), DTypeError,
             "{}: result type {} cannot be cast to self's dtype {}", op, dtype_name(result.dtype()),
             dtype_name(self.dtype()));
  NoGradGuard no_grad;
  self.copy_(result);
  return self;
}

// The fast path the optimizers rely on: same dtype, one device, no autograd, b broadcast to self.
bool direct_binary(Tensor& self, const Tensor& other, BinaryOp kind, double alpha) {
  if (!other.defined() || !self.defined()) return false;
  if (GradMode::is_enabled() && (self.requires_grad() || other.requires_grad())) return false;
  if (self.dtype() != other.dtype() || self.device() != other.device()) return false;
  if (self.dtype() == DType::boolean) return false;
  if (kind == BinaryOp::div && !is_floating(self.dtype())) return false;
  Shape shape = broadcast_shapes("in-place op", self.shape(), other.shape());
  if (shape != self.shape()) return false;
  // An overlapping other (the same storage) could be read after it was written.
  if (other.storage() == self.storage() && !other.is_same(self)) return false;
  const MemoryFormat format = result_format(shape, {&self});
  const Tensor out = in_memory_order(self, format);
  kernels_for<ElementwiseKernels>("binary", self.device())
      .binary(kind, out, in_memory_order(other.detach().expand(shape), format), out, alpha);
  self.storage()->bump_version();
  return true;
}

}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  if (direct_binary(*this, other, BinaryOp::add, alpha)) return *this;
  return inplace("add_", *this, {&other}, [&](const Tensor& s) { return add(s, other, alpha); });
}
Tensor& Tensor::add_(double value) {
  return inplace("add_", *this, {}, [&](const Tensor& s) { return add(s, value); });
}
Tensor& Tensor::sub_(const Tensor& other) {
  if (direct_binary(*this, other, BinaryOp::sub, 1.0)) return *this;
  return inplace("sub_", *this, {&other}, [&](const Tensor& s) { return sub(s, other); });
}
Tensor& Tensor::sub_(double value) {
  return inplace("sub_", *this, {}, [&](const Tensor& s) { return sub(s, value); });
}
Tensor& Tensor::mul_(const Tensor& other) {
  if (direct_binary(*this, other, BinaryOp::mul, 1.0)) return *this;
  return inplace("mul_", *this, {&other}, [&](const Tensor& s) { return mul(s, other); });
}
Tensor& Tensor::mul_(double value) {
  return inplace("mul_", *this, {}, [&](const Tensor& s) { return mul(s, value); });
}
Tensor& Tensor::div_(const Tensor& other) {
  if (direct_binary(*this, other, BinaryOp::div, 1.0)) return *this;
  return inplace("div_", *this, {&other}, [&](const Tensor& s) { return div(s, other); });
}
Tensor& Tensor::div_(double value) {
  return inplace("div_", *this, {}, [&](const Tensor& s) { return div(s, value); });
}
Tensor& Tensor::clamp_(double min, double max) {
  return inplace("clamp_", *this, {}, [&](const Tensor& s) { return kiln::clamp(s, min, max); });
}
Tensor& Tensor::relu_() {
  return inplace("relu_", *this, {}, [](const Tensor& s) { return kiln::relu(s); });
}
Tensor& Tensor::neg_() {
  return inplace("neg_", *this, {}, [](const Tensor& s) { return kiln::neg(s); });
}
Tensor& Tensor::exp_() {
  return inplace("exp_", *this, {}, [](const Tensor& s) { return kiln::exp(s); });
}
Tensor& Tensor::sqrt_() {
  return inplace("sqrt_", *this, {}, [](const Tensor& s) { return kiln::sqrt(s); });
}
Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  return inplace("masked_fill_", *this, {},
                 [&](const Tensor& s) { return kiln::masked_fill(s, mask, value); });
}

}  // namespace kiln
