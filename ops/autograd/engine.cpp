// The backward pass: find every node reachable from the roots, count how many gradients each will
// receive, then run nodes whose gradients are complete (Kahn's algorithm on the reversed tape).
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/core/autocast.h"
#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/profiler.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"

namespace kiln {

namespace {

std::unordered_map<Node*, int> count_dependencies(const std::vector<Node*>& roots) {
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack = roots;
  std::unordered_map<Node*, bool> seen;
  for (Node* r : roots) seen[r] = true;
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges) {
      if (!edge.valid()) continue;
      Node* next = edge.node.get();
      dependencies[next] += 1;
      if (!seen[next]) {
        seen[next] = true;
        stack.push_back(next);
      }
    }
  }
  return dependencies;
}

// The callbacks of the backward pass running on this thread, or null outside one.
thread_local std::vector<std::function<void()>>* current_callbacks = nullptr;

// Installs this pass's callback list for its lifetime, restoring an enclosing pass's (a hook that
// runs a backward of its own) when done.
class CallbackScope {
 public:
  CallbackScope() : outer_(current_callbacks) { current_callbacks = &callbacks_; }
  ~CallbackScope() { current_callbacks = outer_; }
  // Runs the queued callbacks, including any they queue, in order.
  void run() {
    for (size_t i = 0; i < callbacks_.size(); ++i) {
      std::function<void()> callback = std::move(callbacks_[i]);
      callback();
    }
    callbacks_.clear();
  }

 private:
  std::vector<std::function<void()>> callbacks_;
  std::vector<std::function<void()>>* outer_;
};

}  // namespace

void queue_backward_callback(std::function<void()> callback) {
  KILN_CHECK(current_callbacks != nullptr, AutogradError,
             "queue_backward_callback: called outside a backward pass; queue callbacks from a "
             "gradient hook");
  current_callbacks->push_back(std::move(callback));
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph) {
  NoGradGuard no_grad;
  // Backward ops run in the dtypes the forward gave them: the autocast policy is for forward.
  AutocastSuspend no_autocast;
  CallbackScope callbacks;
  std::unordered_map<Node*, Tensor> pending;  // gradient summed so far, per node
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive;
  std::vector<Node*> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    KILN_CHECK(root.requires_grad(), AutogradError,
               "backward: tensor of shape {} does not require grad and has no grad_fn; call "
               "requires_grad_() on the leaves it was computed from",
               shape_str(root.shape()));
    Tensor grad = grads[i];
    if (!grad.defined()) {
      KILN_CHECK(root.numel() == 1, AutogradError,
                 "backward: grad can be implicitly created only for outputs with one element, got "
                 "shape {}; pass a gradient of the same shape",
                 shape_str(root.shape()));
      grad = ones_like(root);
    }
    KILN_CHECK(grad.shape() == root.shape(), ShapeError,
               "backward: gradient shape {} does not match output shape {}",
               shape_str(grad.shape()), shape_str(root.shape()));
    Edge edge = gradient_edge(root);
    Node* node = edge.node.get();
    keep_alive[node] = edge.node;
    auto it = pending.find(node);
    if (it == pending.end()) {
      pending[node] = grad;
      root_nodes.push_back(node);
    } else {
      it->second = add(it->second, grad);
    }
  }

  std::unordered_map<Node*, int> dependencies = count_dependencies(root_nodes);
  std::vector<Node*> ready;
  for (Node* r : root_nodes)
    if (dependencies[r] == 0) ready.push_back(r);

  while (!ready.empty()) {
    Node* node = ready.back();
    ready.pop_back();
    Tensor grad = pending[node];
    pending.erase(node);
    std::vector<Tensor> input_grads;
    // A node none of whose consumers sent a gradient has nothing to run or pass on.
    if (grad.defined()) {
      KILN_CHECK(!node->released, AutogradError,
                 "{}: trying to backward through the graph a second time (it was freed after the "
                 "first backward); pass retain_graph=true to the first backward",
                 node->name());
      for (auto& hook : node->pre_hooks) {
        Tensor replaced = hook(grad);
        if (replaced.defined()) grad = replaced;
      }
      // The node's event: the ops it runs are attributed to it. Its name is only built when a
      // profile records.
      std::optional<profiler::Scope> event;
      if (profiler::is_recording())
        event.emplace(node->name().c_str(), profiler::EventKind::backward_node);
      input_grads = node->apply(grad);
    }
    if (!retain_graph && !node->is_reusable()) {
      node->release_saved();
      node->released = true;
    }
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& edge = node->next_edges[i];
      if (!edge.valid()) continue;
      Node* next = edge.node.get();
      keep_alive[next] = edge.node;
      if (i < input_grads.size() && input_grads[i].defined()) {
        auto it = pending.find(next);
        if (it == pending.end())
          pending[next] = input_grads[i];
        else
          it->second = add(it->second, input_grads[i]);
      }
      if (--dependencies[next] == 0) ready.push_back(next);
    }
  }
  callbacks.run();
}

}  // namespace kiln
