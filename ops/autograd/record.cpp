#include "kiln/ops/autograd/record.h"

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/storage.h"
#include "kiln/ops/elementwise.h"

namespace kiln {

namespace {

// Whether `grad` may become a leaf's .grad as it is, without a copy (as PyTorch's AccumulateGrad
// steals a gradient): dense in the leaf's memory format (PyTorch's layout contract for .grad: an
// optimizer then walks a parameter, its gradient and its state in one order), in the leaf's dtype,
// the whole of its storage, and nothing else holding its data, so no later accumulation or in-place
// unscaling reaches another tensor. `holders` is how many handles to it the caller knows of; any
// more (the same gradient handed to another input too, or kept by a hook) and it is copied.
bool can_take(const Tensor& grad, const Tensor& leaf, long holders) {
  return grad.impl_ptr().use_count() == holders && grad.storage() &&
         grad.storage().use_count() == 1 && grad.dtype() == leaf.dtype() &&
         grad.is_contiguous(leaf.suggest_memory_format()) && grad.offset() == 0 &&
         grad.numel() > 0 &&
         grad.storage()->nbytes() == static_cast<size_t>(grad.numel()) * grad.element_size() &&
         !grad.requires_grad();
}

// grad in the leaf's dtype and memory format, in storage of its own: the conversion or the dense
// copy when either makes one (they return grad itself when there is nothing to do), else a clone.
Tensor fresh_copy(const Tensor& grad, const Tensor& leaf) {
  const MemoryFormat format = leaf.suggest_memory_format();
  Tensor out = grad.to(leaf.dtype()).contiguous(format);
  return out.is_same(grad) ? out.clone(format) : out;
}

}  // namespace

Tensor AccumulateGrad::run_leaf_hooks(const Tensor& grad) const {
  Tensor out = grad;
  for (auto& hook : leaf_->autograd_meta().hooks) {
    Tensor replaced = hook(out);
    if (replaced.defined()) out = replaced;
  }
  return out;
}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  // The engine hands over its only handle to a gradient that no other node received.
  const bool engine_only = grad_output.impl_ptr().use_count() == 1;
  Tensor grad = run_leaf_hooks(grad_output);
  AutogradMeta& meta = leaf_->autograd_meta();
  Tensor leaf(leaf_);
  Tensor current = leaf.grad();
  if (!current.defined()) {
    const bool replaced = !grad.is_same(grad_output);
    if (replaced ? can_take(grad, leaf, 1) : engine_only && can_take(grad, leaf, 2))
      leaf.set_grad(grad.detach());
    else  // a fresh copy: grad may be an expanded view or alias another tensor
      leaf.set_grad(fresh_copy(grad, leaf));
  } else if (GradMode::is_enabled()) {
    // A backward with create_graph: the sum keeps the new gradient's history, as PyTorch's.
    leaf.set_grad(add(current, grad));
  } else {
    // The += that lets gradients accumulate across backward passes (gradient accumulation).
    current.add_(grad);
  }
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

namespace {
void attach(Tensor& output, const std::shared_ptr<Node>& node) {
  AutogradMeta& meta = output.impl()->autograd_meta();
  meta.grad_fn = node;
  meta.requires_grad = false;  // non-leaves require grad through grad_fn
  node->output = output.impl();
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

namespace {
class AdjointBackward : public Node {
 public:
  AdjointBackward(std::string name, std::function<Tensor(const Tensor&)> adjoint)
      : name_(std::move(name)), adjoint_(std::move(adjoint)) {}
  std::string name() const override { return name_; }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& grad_output) override { return {adjoint_(grad_output)}; }

 private:
  std::string name_;
  std::function<Tensor(const Tensor&)> adjoint_;
};
}  // namespace

void record_adjoint(Tensor& result, const Tensor& grad, std::string name,
                    std::function<Tensor(const Tensor&)> adjoint) {
  if (!should_record({&grad})) return;
  record(result, std::make_shared<AdjointBackward>(std::move(name), std::move(adjoint)), {&grad});
}

}  // namespace kiln
