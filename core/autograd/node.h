// Node: one recorded op of the dynamic tape. Each node has one output (ops with several outputs,
// such as split, record one node per output), and one edge per input pointing at the node that
// produced that input (or at the leaf's AccumulateGrad), empty where the input needs no gradient.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

class Node;
class PackedTensor;

struct Edge {
  std::shared_ptr<Node> node;
  bool valid() const { return node != nullptr; }
};

// A tensor kept for backward. It holds a detached alias (so a node never owns its own output,
// which would be a reference cycle) and the storage version at save time, to catch in-place edits;
// or, when saved-tensor hooks are installed (core/autograd/saved_tensor_hooks.h), what they packed.
// It also remembers where the tensor's own gradient goes (the input's grad_fn or leaf, or that it
// is the owner's output), so that a backward that creates a graph (create_graph, double backward)
// gets the tensor back with its history: the second backward then reaches through it.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& tensor);
  // Throws AutogradError if the tensor was modified in place since it was saved, or was released.
  // With grad mode on (a backward with create_graph), the tensor comes back with its history.
  Tensor unpack(const Node& owner) const;
  void reset() {
    tensor_ = Tensor();
    packed_.reset();
    grad_fn_.reset();
    leaf_.reset();
    released_ = true;
  }

 private:
  Tensor with_history(const Node& owner) const;

  Tensor tensor_;
  std::shared_ptr<PackedTensor> packed_;  // set instead of tensor_ when hooks packed it
  std::shared_ptr<Node> grad_fn_;         // a saved input computed by an op: its node
  std::shared_ptr<TensorImpl> leaf_;      // a saved leaf that requires grad
  const TensorImpl* source_ = nullptr;    // identity only: is it the owner's output?
  uint64_t saved_version_ = 0;
  bool released_ = false;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  // Given the gradient of the output, returns one gradient per input edge (undefined where an
  // input needs none). Runs with grad mode off.
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  // Frees saved tensors after a backward pass without retain_graph.
  virtual void release_saved() {}
  // AccumulateGrad outlives graphs; other nodes are spent after one backward pass.
  virtual bool is_reusable() const { return false; }
  // Whether apply() computes its gradients from differentiable ops on the gradient and on saved
  // tensors, so that a backward with create_graph records it and can be differentiated again
  // (double backward). Nodes that call a backward kernel directly leave it false: under
  // create_graph their results get a node that refuses a second backward, naming this one.
  virtual bool differentiable_backward() const { return false; }

  std::vector<Edge> next_edges;
  std::vector<GradHook> pre_hooks;  // hooks of the (non-leaf) tensor this node produced
  // The tensor this node produced, for identity only (a saved output is recognised by it).
  const TensorImpl* output = nullptr;
  bool released = false;
};

// True when grad mode is on and any defined input requires grad.
bool should_record(std::initializer_list<const Tensor*> inputs);

// Checks an in-place op on `self` against autograd's rules, before the data changes.
void check_inplace(const char* op, const Tensor& self);

}  // namespace kiln
