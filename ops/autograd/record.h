// Recording the tape: the node a leaf's gradient flows into, the edges from a node to its inputs,
// and the backward pass that runs them. On the ops floor because accumulating a gradient is
// arithmetic, an op like any other; core/autograd/node.h holds the tape's types.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/node.h"
#include "kiln/core/tensor.h"

namespace kiln {

// The node a leaf's gradient flows into: it runs the leaf's hooks, adds into .grad, then runs the
// post-accumulate hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  bool is_reusable() const override { return true; }
  bool differentiable_backward() const override { return true; }
  // The leaf's gradient hooks applied to `grad`, without accumulating (autograd::grad).
  Tensor run_leaf_hooks(const Tensor& grad) const;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// The edge through which a gradient reaches `tensor`: its grad_fn, its leaf accumulator, or none.
Edge gradient_edge(const Tensor& tensor);

// Connects `node` to the inputs' edges and makes it the grad_fn of `output`.
void record(Tensor& output, std::shared_ptr<Node> node,
            std::initializer_list<const Tensor*> inputs);
void record(Tensor& output, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs);

// For a backward that is linear in its incoming gradient and reads nothing that requires grad
// (pooling, nll_loss: indices, targets and weights only): under create_graph, records `result`,
// computed from `grad` by a kernel, with a node `name` that maps a gradient G to adjoint(G), the
// transpose of that linear map, toward `grad`. adjoint must be written with recorded ops, so that
// derivatives of any order follow. Does nothing when grad mode is off or grad needs no gradient.
void record_adjoint(Tensor& result, const Tensor& grad, std::string name,
                    std::function<Tensor(const Tensor&)> adjoint);

// How run_graph runs: the public forms are Tensor::backward and autograd::grad
// (ops/autograd/grad.h).
struct GraphOptions {
  bool retain_graph = false;
  bool create_graph = false;  // backward ops record, so the gradients can be differentiated
  // When set, the gradients arriving at these tensors are returned instead of accumulated into
  // .grad, and only the nodes leading to them run (autograd::grad).
  const std::vector<Tensor>* inputs = nullptr;
  bool allow_unused =
      false;  // an input no gradient reaches gives an undefined tensor, not an error
  const char* op = "backward";  // the name errors give
};

// Runs the backward pass from `roots` with the given gradients (an undefined one: ones, for a
// one-element root); returns the inputs' gradients when options.inputs is set, else nothing.
std::vector<Tensor> run_graph(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                              const GraphOptions& options);

// Runs the backward pass from `roots` with the given gradients (see Tensor::backward).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph, bool create_graph = false);

// Runs `callback` once the backward pass running on this thread has finished every node (as
// PyTorch's Variable._execution_engine.queue_callback): distributed training waits there for the
// gradient reductions it started from hooks. Callbacks run in the order queued, and may queue more.
// Only from inside a backward pass (a hook); elsewhere an AutogradError.
void queue_backward_callback(std::function<void()> callback);

}  // namespace kiln
