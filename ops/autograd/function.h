// Functions with a forward and a backward of one's own, as torch.autograd.Function: any number of
// tensor inputs and outputs, tensors saved for backward through the context, the backward called
// once with the gradient of every output (zeros for an output the loss did not use, as PyTorch's
// materialised gradients). The backward's ops are recorded under create_graph, so a backward
// written with differentiable ops has double backward too.
//
//   struct SinCos : autograd::Function {
//     std::vector<Tensor> forward(autograd::FunctionContext& ctx,
//                                 const std::vector<Tensor>& in) override {
//       ctx.save_for_backward({in[0]});
//       return {sin(in[0]), cos(in[0])};
//     }
//     std::vector<Tensor> backward(autograd::FunctionContext& ctx,
//                                  const std::vector<Tensor>& grads) override {
//       Tensor x = ctx.saved_tensors()[0];
//       return {grads[0] * cos(x) - grads[1] * sin(x)};
//     }
//   };
//   std::vector<Tensor> sc = autograd::apply(std::make_shared<SinCos>(), {x});
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/autograd/node.h"
#include "kiln/core/tensor.h"

namespace kiln::autograd {

class Function;

class FunctionContext {
 public:
  // Tensors for backward (inputs or outputs), checked for in-place changes when read back.
  void save_for_backward(const std::vector<Tensor>& tensors);
  // What save_for_backward kept; an AutogradError if one was changed in place since, or if the
  // graph was freed by an earlier backward.
  std::vector<Tensor> saved_tensors() const;
  // Whether input i needs a gradient (ctx.needs_input_grad[i]); a backward may skip the others.
  bool needs_input_grad(size_t i) const;

 private:
  friend class FunctionBackward;
  friend std::vector<Tensor> apply(const std::shared_ptr<Function>& function,
                                   const std::vector<Tensor>& inputs);
  std::vector<SavedTensor> saved_;
  std::vector<bool> needs_input_grad_;
  const Node* owner_ = nullptr;
};

class Function {
 public:
  virtual ~Function() = default;
  // Runs with grad mode off: what it computes is not recorded.
  virtual std::vector<Tensor> forward(FunctionContext& ctx, const std::vector<Tensor>& inputs) = 0;
  // One gradient per input (undefined where the input needs none), of the input's shape, from
  // one gradient per output.
  virtual std::vector<Tensor> backward(FunctionContext& ctx,
                                       const std::vector<Tensor>& grad_outputs) = 0;
  // Names the function's node in errors and profiles: "<name>Backward".
  virtual std::string name() const { return "Function"; }
};

// Runs function's forward on inputs and, when grad mode is on and an input requires grad, records
// its backward for every floating output.
std::vector<Tensor> apply(const std::shared_ptr<Function>& function,
                          const std::vector<Tensor>& inputs);

}  // namespace kiln::autograd
