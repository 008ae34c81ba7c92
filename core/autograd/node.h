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
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& tensor);
  // Throws AutogradError if the tensor was modified in place since it was saved, or was released.
  Tensor unpack(const Node& owner) const;
  void reset() {
    tensor_ = Tensor();
    packed_.reset();
    released_ = true;
  }

 private:
  Tensor tensor_;
  std::shared_ptr<PackedTensor> packed_;  // set instead of tensor_ when hooks packed it
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

  std::vector<Edge> next_edges;
  std::vector<GradHook> pre_hooks;  // hooks of the (non-leaf) tensor this node produced
  bool released = false;
};

// True when grad mode is on and any defined input requires grad.
bool should_record(std::initializer_list<const Tensor*> inputs);

// Checks an in-place op on `self` against autograd's rules, before the data changes.
void check_inplace(const char* op, const Tensor& self);

}  // namespace kiln
