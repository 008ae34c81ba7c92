// The backward pass: find every node reachable from the roots, count how many gradients each will
// receive, then run nodes whose gradients are complete (Kahn's algorithm on the reversed tape).
#include <fmt/format.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kiln/core/autocast.h"
#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/profiler.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/rearrange.h"

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

namespace {

// Runs under create_graph in place of a node whose backward calls a kernel directly: a second
// backward reaching it would need that kernel's own derivative, which kiln does not have.
class NotDifferentiableBackward : public Node {
 public:
  explicit NotDifferentiableBackward(std::string first) : first_(std::move(first)) {}
  std::string name() const override { return first_ + "'s backward"; }
  std::vector<Tensor> apply(const Tensor&) override {
    throw AutogradError(fmt::format(
        "{}: the backward of {} is not differentiable in kiln (it runs a backward kernel, not "
        "differentiable ops), so a gradient computed with create_graph=true through it cannot be "
        "differentiated again; docs/guide.md section 3 lists the ops that have double backward",
        name(), first_));
  }

 private:
  std::string first_;
};

// Under create_graph, a node whose backward is not recorded: its gradients get a node that refuses
// a second backward, rather than none (which would make that derivative silently zero). Its edges
// are the node's own and the incoming gradient's, so a second backward toward any of them
// reaches it (a gradient-only pass runs only the nodes that lead to an input).
void mark_not_differentiable(std::vector<Tensor>& grads, const Node& node,
                             const Tensor& grad_output) {
  for (Tensor& g : grads) {
    if (!g.defined()) continue;
    Tensor alias = g.detach();
    auto refusal = std::make_shared<NotDifferentiableBackward>(node.name());
    record(alias, refusal, {});
    refusal->next_edges = node.next_edges;
    refusal->next_edges.push_back(gradient_edge(grad_output));
    g = alias;
  }
}

// Anomaly detection: a NaN in any gradient a node returns stops the pass, naming the node.
void check_anomaly(const Node& node, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined() || !is_floating(g.dtype())) continue;
    bool has_nan = false;
    {
      NoGradGuard no_grad;
      has_nan = any(isnan(g)).item<bool>();
    }
    KILN_CHECK(!has_nan, AutogradError,
               "anomaly detection: {} returned NaN values in its gradient for input {} (shape {}); "
               "the forward op it belongs to made them",
               node.name(), i, shape_str(g.shape()));
  }
}

// Every node from which a capture target can be reached (through at least one edge): the nodes a
// gradient-only pass must run. Iterative, as graphs of deep models are thousands of nodes deep.
std::unordered_set<Node*> nodes_leading_to(const std::vector<Node*>& roots,
                                           const std::unordered_set<Node*>& targets) {
  std::unordered_set<Node*> leading;
  std::unordered_set<Node*> visited;
  std::vector<std::pair<Node*, size_t>> stack;
  for (Node* r : roots) {
    if (!visited.insert(r).second) continue;
    stack.push_back({r, 0});
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->next_edges.size()) {
        Node* child = node->next_edges[next++].node.get();
        if (child && visited.insert(child).second) stack.push_back({child, 0});
        continue;
      }
      for (const Edge& edge : node->next_edges) {
        Node* child = edge.node.get();
        if (child && (targets.count(child) || leading.count(child))) {
          leading.insert(node);
          break;
        }
      }
      stack.pop_back();
    }
  }
  return leading;
}

}  // namespace

std::vector<Tensor> run_graph(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                              const GraphOptions& options) {
  // Backward ops record only under create_graph, so that the gradients can be differentiated.
  std::optional<NoGradGuard> no_grad;
  std::optional<EnableGradGuard> enable_grad;
  if (options.create_graph)
    enable_grad.emplace();
  else
    no_grad.emplace();
  const bool retain_graph = options.retain_graph;
  // Backward ops run in the dtypes the forward gave them: the autocast policy is for forward.
  AutocastSuspend no_autocast;
  CallbackScope callbacks;
  std::unordered_map<Node*, Tensor> pending;  // gradient summed so far, per node
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive;
  std::vector<Node*> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    KILN_CHECK(root.defined() && root.requires_grad(), AutogradError,
               "{}: output {} does not require grad and has no grad_fn; call requires_grad_() on "
               "the leaves it was computed from",
               options.op, i);
    Tensor grad = i < grads.size() ? grads[i] : Tensor();
    if (!grad.defined()) {
      KILN_CHECK(root.numel() == 1, AutogradError,
                 "{}: grad can be implicitly created only for outputs with one element, got "
                 "shape {}; pass a gradient of the same shape",
                 options.op, shape_str(root.shape()));
      grad = ones_like(root);
    }
    KILN_CHECK(grad.shape() == root.shape(), ShapeError,
               "{}: gradient shape {} does not match output shape {}", options.op,
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

  // A gradient-only pass (autograd::grad) takes the gradient arriving at each input's node, and
  // runs only the nodes that lead to one; it never accumulates into .grad.
  const bool capturing = options.inputs != nullptr;
  std::unordered_map<Node*, std::vector<size_t>> targets;
  std::vector<Tensor> captured;
  std::unordered_set<Node*> leading;
  if (capturing) {
    captured.resize(options.inputs->size());
    std::unordered_set<Node*> target_set;
    for (size_t i = 0; i < options.inputs->size(); ++i) {
      const Tensor& input = (*options.inputs)[i];
      KILN_CHECK(input.defined() && input.requires_grad(), AutogradError,
                 "{}: input {} does not require grad, so no gradient flows to it; call "
                 "requires_grad_() on it before computing the outputs",
                 options.op, i);
      Edge edge = gradient_edge(input);
      keep_alive[edge.node.get()] = edge.node;
      targets[edge.node.get()].push_back(i);
      target_set.insert(edge.node.get());
    }
    leading = nodes_leading_to(root_nodes, target_set);
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
    const bool runs = !capturing || leading.count(node) != 0;
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
      if (auto target = targets.find(node); target != targets.end()) {
        if (auto* accumulate = dynamic_cast<AccumulateGrad*>(node))
          grad = accumulate->run_leaf_hooks(grad);
        for (size_t i : target->second) captured[i] = grad;
      }
      if (runs) {
        // The node's event: the ops it runs are attributed to it. Its name is only built when a
        // profile records.
        std::optional<profiler::Scope> event;
        if (profiler::is_recording())
          event.emplace(node->name().c_str(), profiler::EventKind::backward_node);
        if (options.create_graph && !node->differentiable_backward()) {
          NoGradGuard unrecorded;
          input_grads = node->apply(grad);
          mark_not_differentiable(input_grads, *node, grad);
        } else {
          input_grads = node->apply(grad);
        }
        if (AnomalyMode::is_enabled()) check_anomaly(*node, input_grads);
      }
    }
    if (!runs) continue;
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
  if (capturing && !options.allow_unused) {
    for (size_t i = 0; i < captured.size(); ++i)
      KILN_CHECK(captured[i].defined(), AutogradError,
                 "{}: input {} (shape {}) is not reached from the outputs, so it has no gradient; "
                 "pass allow_unused=true to get an undefined tensor for it",
                 options.op, i, shape_str((*options.inputs)[i].shape()));
  }
  return captured;
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph, bool create_graph) {
  // As PyTorch's retain_graph=None: a graph that records its backward is kept.
  run_graph(roots, grads,
            {.retain_graph = retain_graph || create_graph, .create_graph = create_graph});
}

}  // namespace kiln
