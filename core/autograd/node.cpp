#include "kiln/core/autograd/node.h"

#include <initializer_list>
#include <memory>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/ops/elementwise.h"

namespace kiln {

SavedTensor::SavedTensor(const Tensor& tensor) {
  if (!tensor.defined()) return;
  tensor_ = tensor.detach();
  saved_version_ = tensor.version();
}

Tensor SavedTensor::unpack(const Node& owner) const {
  KILN_CHECK(!released_, AutogradError,
             "{}: trying to backward through the graph a second time (its saved tensors were freed "
             "after the first backward); pass retain_graph=true to the first backward",
             owner.name());
  if (!tensor_.defined()) return tensor_;
  KILN_CHECK(tensor_.version() == saved_version_, AutogradError,
             "{}: a tensor saved for backward, of shape {}, was modified by an in-place operation "
             "(saved at version {}, now version {}); use the out-of-place form (add instead of "
             "add_) or clone() before modifying it",
             owner.name(), shape_str(tensor_.shape()), saved_version_, tensor_.version());
  return tensor_;
}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  Tensor grad = grad_output;
  AutogradMeta& meta = leaf_->autograd_meta();
  for (auto& hook : meta.hooks) {
    Tensor replaced = hook(grad);
    if (replaced.defined()) grad = replaced;
  }
  Tensor leaf(leaf_);
  Tensor current = leaf.grad();
  if (!current.defined()) {
    // A fresh contiguous copy: grad_output may be an expanded view or alias another tensor.
    leaf.set_grad(grad.to(leaf.dtype()).contiguous().clone());
  } else {
    // The += that lets gradients accumulate across backward passes (gradient accumulation).
    current.add_(grad);
  }
  Tensor updated = leaf.grad();
  for (auto& hook : meta.post_accumulate_hooks) hook(leaf);
  return {};
}

Edge gradient_edge(const Tensor& tensor) {
  if (!tensor.defined() || !tensor.requires_grad()) return {};
  AutogradMeta& meta = tensor.impl()->autograd_meta();
  if (meta.grad_fn) return {meta.grad_fn};
  std::shared_ptr<Node> accumulator = meta.grad_accumulator.lock();
  if (!accumulator) {
    accumulator = std::make_shared<AccumulateGrad>(tensor.impl_ptr());
    meta.grad_accumulator = accumulator;
  }
  return {accumulator};
}

bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

namespace {
void attach(Tensor& output, const std::shared_ptr<Node>& node) {
  AutogradMeta& meta = output.impl()->autograd_meta();
  meta.grad_fn = node;
  meta.requires_grad = false;  // non-leaves require grad through grad_fn
}
}  // namespace

void record(Tensor& output, std::shared_ptr<Node> node,
            std::initializer_list<const Tensor*> inputs) {
  node->next_edges.clear();
  for (const Tensor* t : inputs) node->next_edges.push_back(t ? gradient_edge(*t) : Edge{});
  attach(output, node);
}

void record(Tensor& output, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs) {
  node->next_edges.clear();
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  attach(output, node);
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
