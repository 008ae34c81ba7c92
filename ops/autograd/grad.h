// autograd::grad, as torch.autograd.grad: the gradients of outputs with respect to chosen inputs,
// returned rather than accumulated into .grad. With create_graph the backward ops are recorded, so
// the gradients can be differentiated again (gradient penalties, Hessian-vector products).
#pragma once

#include <optional>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::autograd {

struct GradOptions {
  // Keep the graph for another backward; unset: as create_graph (PyTorch's default).
  std::optional<bool> retain_graph = std::nullopt;
  // Record the backward pass, so the gradients have a history and can be differentiated again.
  // Ops whose backward runs a kernel of its own refuse the second backward with an AutogradError
  // naming them (docs/guide.md section 3 lists the ops with double backward).
  bool create_graph = false;
  // An input no gradient reaches gives an undefined tensor instead of an AutogradError.
  bool allow_unused = false;
};

// The gradient of sum_i <outputs[i], grad_outputs[i]> with respect to each input (every input must
// require grad). grad_outputs may be empty or hold undefined tensors for one-element outputs
// (ones). Nothing is accumulated into any .grad, and only the ops that lead to an input run.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, GradOptions options = {});

}  // namespace kiln::autograd
