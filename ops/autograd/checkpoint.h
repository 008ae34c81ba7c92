// Activation checkpointing, as torch.utils.checkpoint.checkpoint(fn, *inputs, use_reentrant=False):
// checkpoint(fn, inputs...) returns fn(inputs...), but the tensors the ops inside fn save for
// backward are not kept: only the inputs are. When backward first needs one of them, fn runs again
// on the same inputs, with the forward's random state (the default generator's seed and offset, so
// dropout draws the same mask), autocast state and grad mode, and its saved tensors are used. The
// activations inside fn are traded for a second forward of fn.
//
//   Tensor y = checkpoint([&](const Tensor& x) { return block->forward(x); }, x);
//
// The graph is the forward's own (the saved tensors are what is recomputed), so gradients reach
// every tensor fn uses that requires grad: its parameters even when no input requires grad (the
// case PyTorch's reentrant variant warns about, and which needs no warning here), and tensors fn
// captures. With grad mode off it only calls fn.
//
// fn must do the same thing when run again: the same ops on the same shapes (an AutogradError
// says when the recomputation saved other tensors). Its inputs must not be modified in place
// between the forward and backward (an AutogradError says so). State other than the default
// generator's is not restored, as in PyTorch: a dropout given a Generator of its own draws another
// mask when recomputed, which makes its gradient wrong without an error: leave dropout on the
// default one. A BatchNorm in training mode updates its running statistics in the forward only,
// not again in the recomputation (PyTorch updates them in both, so a checkpointed block's running
// statistics there move twice per batch and its num_batches_tracked counts 2 a batch).
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/autograd/saved_tensor_hooks.h"
#include "kiln/core/tensor.h"

namespace kiln {

// True while this thread runs a checkpointed function again for backward: state the forward
// already updated (BatchNorm's running statistics) is left alone.
bool is_recomputing_checkpoint();

namespace detail {

class CheckpointFrame;

// The forward of one checkpoint: for its lifetime, what ops save for backward on this thread goes
// to the frame as a slot number; rerun(inputs) is how backward recomputes them.
class CheckpointForward {
 public:
  CheckpointForward(const std::vector<Tensor>& inputs,
                    std::function<void(const std::vector<Tensor>&)> rerun);
  ~CheckpointForward();
  CheckpointForward(const CheckpointForward&) = delete;
  CheckpointForward& operator=(const CheckpointForward&) = delete;

 private:
  std::shared_ptr<CheckpointFrame> frame_;  // null when grad mode is off
  std::unique_ptr<SavedTensorHooks> hooks_;
  std::optional<SavedTensorHooksGuard> guard_;
};

}  // namespace detail

// Returns fn(inputs...) (whatever fn returns), keeping only the inputs for backward. Arguments
// other than tensors are captured by fn.
template <typename Fn, typename... Inputs>
requires(std::same_as<std::remove_cvref_t<Inputs>, Tensor>&&...) auto checkpoint(
    Fn fn, const Inputs&... inputs) {
  detail::CheckpointForward forward({inputs...}, [fn](const std::vector<Tensor>& again) mutable {
    [&]<size_t... I>(std::index_sequence<I...>) {
      fn(again[I]...);
    }
    (std::index_sequence_for<Inputs...>{});
  });
  return fn(inputs...);
}

}  // namespace kiln
