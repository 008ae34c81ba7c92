// The autograd half of Tensor: requires_grad, .grad, backward, hooks, detach.
#include <cstdint>
#include <memory>
#include <utility>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/elementwise.h"

namespace kiln {

bool Tensor::requires_grad() const {
  const TensorImpl* p = impl();
  KILN_CHECK(p != nullptr, ValueError, "requires_grad: use of an undefined tensor");
  return p->autograd && (p->autograd->requires_grad || p->autograd->grad_fn != nullptr);
}

Tensor& Tensor::requires_grad_(bool on) {
  KILN_CHECK(is_leaf(), AutogradError,
             "requires_grad_: can only change requires_grad of leaf tensors; this one was computed "
             "by {} (use detach().requires_grad_() for a new leaf)",
             grad_fn()->name());
  KILN_CHECK(!on || is_floating(dtype()), AutogradError,
             "requires_grad_: only floating-point tensors can require gradients, got {}",
             dtype_name(dtype()));
  impl()->autograd_meta().requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  return grad_fn() == nullptr;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  const TensorImpl* p = impl();
  KILN_CHECK(p != nullptr, ValueError, "grad_fn: use of an undefined tensor");
  return p->autograd ? p->autograd->grad_fn : none;
}

Tensor Tensor::grad() const {
  const TensorImpl* p = impl();
  KILN_CHECK(p != nullptr, ValueError, "grad: use of an undefined tensor");
  return p->autograd && p->autograd->grad ? *p->autograd->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) {
  if (grad.defined()) {
    KILN_CHECK(grad.shape() == shape(), ShapeError,
               "set_grad: gradient shape {} does not match tensor shape {}",
               shape_str(grad.shape()), shape_str(shape()));
    impl()->autograd_meta().grad = std::make_shared<Tensor>(grad);
  } else if (impl()->autograd) {
    impl()->autograd->grad.reset();
  }
}

void Tensor::zero_grad() {
  set_grad(Tensor());
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  run_backward({*this}, {gradient}, retain_graph, create_graph);
}

Tensor Tensor::detach() const {
  return make_tensor(storage(), shape(), strides(), offset(), dtype());
}

void Tensor::set_data(const Tensor& other) {
  KILN_CHECK(other.defined(), ValueError, "set_data: the new data is an undefined tensor");
  KILN_CHECK(!requires_grad() || is_floating(other.dtype()), DTypeError,
             "set_data: a tensor that requires grad needs floating data, got {}",
             dtype_name(other.dtype()));
  TensorImpl* self = impl();
  self->storage = other.storage();
  self->shape = other.shape();
  self->strides = other.strides();
  self->offset = other.offset();
  self->dtype = other.dtype();
}

void Tensor::register_hook(GradHook hook) {
  KILN_CHECK(requires_grad(), AutogradError,
             "register_hook: cannot register a hook on a tensor that does not require grad");
  if (is_leaf())
    impl()->autograd_meta().hooks.push_back(std::move(hook));
  else
    grad_fn()->pre_hooks.push_back(std::move(hook));
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateHook hook) {
  KILN_CHECK(is_leaf() && requires_grad(), AutogradError,
             "register_post_accumulate_grad_hook: only leaf tensors that require grad have a .grad "
             "to accumulate into");
  impl()->autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

void Tensor::retain_grad() {
  KILN_CHECK(requires_grad(), AutogradError,
             "retain_grad: cannot retain the grad of a tensor that does not require grad");
  if (is_leaf()) return;
  AutogradMeta& meta = impl()->autograd_meta();
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  // A weak reference: the hook lives on grad_fn, which the tensor itself keeps alive.
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  grad_fn()->pre_hooks.push_back([weak](const Tensor& grad) {
    if (auto impl = weak.lock()) {
      Tensor self(impl);
      Tensor current = self.grad();
      self.impl()->autograd_meta().grad =
          std::make_shared<Tensor>(current.defined() ? current + grad : grad.clone());
    }
    return Tensor();
  });
}

uint64_t Tensor::version() const {
  return storage()->version();
}

}  // namespace kiln
