#include "kiln/core/autograd/node.h"

#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/autograd/saved_tensor_hooks.h"

namespace kiln {

namespace {
thread_local SavedTensorHooks* installed_hooks = nullptr;
}  // namespace

SavedTensorHooksGuard::SavedTensorHooksGuard(SavedTensorHooks& hooks) : previous_(installed_hooks) {
  installed_hooks = &hooks;
}

SavedTensorHooksGuard::~SavedTensorHooksGuard() {
  installed_hooks = previous_;
}

SavedTensorHooks* current_saved_tensor_hooks() {
  return installed_hooks;
}

SavedTensor::SavedTensor(const Tensor& tensor) {
  if (!tensor.defined()) return;
  if (installed_hooks) {
    packed_ = installed_hooks->pack(tensor);
    return;
  }
  tensor_ = tensor.detach();
  saved_version_ = tensor.version();
  source_ = tensor.impl();
  if (tensor.requires_grad()) {
    if (tensor.grad_fn())
      grad_fn_ = tensor.grad_fn();
    else
      leaf_ = tensor.impl_ptr();
  }
}

Tensor SavedTensor::with_history(const Node& owner) const {
  std::shared_ptr<Node> grad_fn = grad_fn_;
  if (!grad_fn && !leaf_ && source_ != nullptr && source_ == owner.output)
    grad_fn = std::const_pointer_cast<Node>(owner.shared_from_this());
  if (!grad_fn && !leaf_) return tensor_;
  Tensor alias = tensor_.detach();
  AutogradMeta& meta = alias.impl()->autograd_meta();
  if (grad_fn) {
    meta.grad_fn = std::move(grad_fn);
  } else {
    // The leaf's own accumulator (its forward use made one), so gradients reach its .grad.
    meta.requires_grad = true;
    meta.grad_accumulator = leaf_->autograd_meta().grad_accumulator;
  }
  return alias;
}

Tensor SavedTensor::unpack(const Node& owner) const {
  KILN_CHECK(!released_, AutogradError,
             "{}: trying to backward through the graph a second time (its saved tensors were freed "
             "after the first backward); pass retain_graph=true to the first backward",
             owner.name());
  // Whoever packed the tensor answers for its values (checkpointing checks its inputs' versions).
  if (packed_) {
    KILN_CHECK(!GradMode::is_enabled(), AutogradError,
               "{}: a backward with create_graph (double backward) through a tensor saved by "
               "saved-tensor hooks (activation checkpointing) is not supported; differentiate "
               "the model without checkpointing",
               owner.name());
    return packed_->unpack();
  }
  if (!tensor_.defined()) return tensor_;
  KILN_CHECK(tensor_.version() == saved_version_, AutogradError,
             "{}: a tensor saved for backward, of shape {}, was modified by an in-place operation "
             "(saved at version {}, now version {}); use the out-of-place form (add instead of "
             "add_) or clone() before modifying it",
             owner.name(), shape_str(tensor_.shape()), saved_version_, tensor_.version());
  return GradMode::is_enabled() ? with_history(owner) : tensor_;
}

bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void check_inplace(const char* op, const Tensor& self) {
  if (!GradMode::is_enabled() || !self.requires_grad()) return;
  KILN_CHECK(!self.is_leaf(), AutogradError,
             "{}: a leaf tensor that requires grad (shape {}) is used in an in-place operation; "
             "wrap the update in NoGradGuard or use the out-of-place form",
             op, shape_str(self.shape()));
  KILN_CHECK(!self.impl()->is_view, AutogradError,
             "{}: in-place operation on a view of a tensor that requires grad (shape {}) is not "
             "supported; use the out-of-place form",
             op, shape_str(self.shape()));
}

}  // namespace kiln
