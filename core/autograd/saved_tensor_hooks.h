// Saved-tensor hooks, as torch.autograd.graph.saved_tensors_hooks: while a SavedTensorHooks is
// installed on a thread, every tensor an op saves there for backward is handed to its pack(), and
// the SavedTensor keeps what pack() returns instead of the tensor; backward asks that for the
// tensor again. Activation checkpointing (ops/autograd/checkpoint.h) packs nothing but a slot
// number and recomputes the tensor when backward asks.
#pragma once

#include <memory>

#include "kiln/core/tensor.h"

namespace kiln {

// What a SavedTensor holds in place of its tensor.
class PackedTensor {
 public:
  virtual ~PackedTensor() = default;
  // The saved tensor again (its values as they were when packed); called by backward, with grad
  // mode off, once or more.
  virtual Tensor unpack() = 0;
};

class SavedTensorHooks {
 public:
  virtual ~SavedTensorHooks() = default;
  // Called for each defined tensor saved for backward on this thread while installed.
  virtual std::shared_ptr<PackedTensor> pack(const Tensor& tensor) = 0;
};

// Installs `hooks` on this thread for its scope. Scopes nest: the innermost packs.
class SavedTensorHooksGuard {
 public:
  explicit SavedTensorHooksGuard(SavedTensorHooks& hooks);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;

 private:
  SavedTensorHooks* previous_;
};

// The innermost hooks installed on this thread, or null.
SavedTensorHooks* current_saved_tensor_hooks();

}  // namespace kiln
