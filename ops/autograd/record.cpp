#include "kiln/ops/autograd/record.h"

#include <initializer_list>
#include <memory>
#include <vector>

#include "kiln/ops/elementwise.h"

namespace kiln {

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
    // A fresh copy, in the leaf's memory format (PyTorch's layout contract for .grad: an
    // optimizer then walks a parameter, its gradient and its state in one order), since
    // grad_output may be an expanded view or alias another tensor.
    leaf.set_grad(grad.to(leaf.dtype()).clone(leaf.suggest_memory_format()));
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

}  // namespace kiln
