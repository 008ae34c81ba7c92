#include "kiln/ops/autograd/checkpoint.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/core/autocast.h"
#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/autograd/saved_tensor_hooks.h"
#include "kiln/core/error.h"
#include "kiln/core/generator.h"

namespace kiln {
namespace {

thread_local int recomputing_depth = 0;

}  // namespace

bool is_recomputing_checkpoint() {
  return recomputing_depth > 0;
}

}  // namespace kiln

namespace kiln::detail {

// What one checkpoint keeps: its inputs, how to run it again and in which state, and one slot per
// tensor its forward saved, filled by the recomputation.
class CheckpointFrame {
 public:
  struct Slot {
    Shape shape;
    DType dtype;
    Device device;
    Tensor value;  // the recomputed tensor, once recomputed and until its node is done
    uint64_t value_version = 0;  // value's version when the recomputation saved it
    bool wanted = true;          // false once the node that saved it has released it
  };

  std::vector<Tensor> inputs;  // detached aliases
  std::vector<bool> input_requires_grad;
  std::vector<uint64_t> input_versions;
  std::function<void(const std::vector<Tensor>&)> rerun;
  GeneratorState rng;
  bool autocast_enabled = false;
  DType autocast_dtype = DType::f16;
  std::vector<Slot> slots;
  bool recomputed = false;

  void recompute();
  Tensor value(size_t index);
};

namespace {

// Marks this thread as recomputing a checkpoint's forward for the guard's lifetime.
struct RecomputingGuard {
  RecomputingGuard() { ++recomputing_depth; }
  ~RecomputingGuard() { --recomputing_depth; }
  RecomputingGuard(const RecomputingGuard&) = delete;
  RecomputingGuard& operator=(const RecomputingGuard&) = delete;
};

// A slot of the frame: what a node of the checkpointed forward holds instead of a tensor.
class CheckpointSlot : public PackedTensor {
 public:
  CheckpointSlot(std::shared_ptr<CheckpointFrame> frame, size_t index)
      : frame_(std::move(frame)), index_(index) {}
  // The node is done with it: the recomputed tensor is freed now, not with the last node of fn.
  ~CheckpointSlot() override {
    CheckpointFrame::Slot& slot = frame_->slots[index_];
    slot.value = Tensor();
    slot.wanted = false;
  }
  CheckpointSlot(const CheckpointSlot&) = delete;
  CheckpointSlot& operator=(const CheckpointSlot&) = delete;
  Tensor unpack() override { return frame_->value(index_); }

 private:
  std::shared_ptr<CheckpointFrame> frame_;
  size_t index_;
};

// The forward's hooks: each saved tensor becomes the next slot, of which only the shape, dtype and
// device are kept (to check the recomputation against).
class ForwardHooks : public SavedTensorHooks {
 public:
  explicit ForwardHooks(std::shared_ptr<CheckpointFrame> frame) : frame_(std::move(frame)) {}
  std::shared_ptr<PackedTensor> pack(const Tensor& tensor) override {
    frame_->slots.push_back({tensor.shape(), tensor.dtype(), tensor.device(), Tensor(), 0, true});
    return std::make_shared<CheckpointSlot>(frame_, frame_->slots.size() - 1);
  }

 private:
  std::shared_ptr<CheckpointFrame> frame_;
};

// The graph the recomputation builds is thrown away; its nodes hold this.
class Discarded : public PackedTensor {
 public:
  Tensor unpack() override {
    throw AutogradError(
        "checkpoint: backward reached the graph of a recomputation, which only fills the "
        "checkpoint's saved tensors");
  }
};

// The recomputation's hooks: the k-th tensor saved fills slot k.
class RecomputeHooks : public SavedTensorHooks {
 public:
  explicit RecomputeHooks(CheckpointFrame& frame) : frame_(frame) {}
  std::shared_ptr<PackedTensor> pack(const Tensor& tensor) override {
    const size_t k = count_++;
    KILN_CHECK(k < frame_.slots.size(), AutogradError,
               "checkpoint: the recomputation saved more tensors for backward than the forward "
               "({}); the checkpointed function must run the same ops when run again",
               frame_.slots.size());
    CheckpointFrame::Slot& slot = frame_.slots[k];
    KILN_CHECK(tensor.shape() == slot.shape && tensor.dtype() == slot.dtype &&
                   tensor.device() == slot.device,
               AutogradError,
               "checkpoint: tensor {} saved for backward was {} {} on {} in the forward but {} {} "
               "on {} when recomputed; the checkpointed function must run the same ops on the "
               "same shapes when run again",
               k, shape_str(slot.shape), dtype_name(slot.dtype), slot.device.str(),
               shape_str(tensor.shape()), dtype_name(tensor.dtype()), tensor.device().str());
    if (slot.wanted) {
      slot.value = tensor.detach();
      slot.value_version = tensor.version();
    }
    return discarded_;
  }
  size_t count() const { return count_; }

 private:
  CheckpointFrame& frame_;
  size_t count_ = 0;
  std::shared_ptr<PackedTensor> discarded_ = std::make_shared<Discarded>();
};

// Sets the default generator to `state` for its scope, and back to where it was after.
class ForkedGenerator {
 public:
  explicit ForkedGenerator(GeneratorState state) : previous_(default_generator().state()) {
    default_generator().set_state(state);
  }
  ~ForkedGenerator() { default_generator().set_state(previous_); }
  ForkedGenerator(const ForkedGenerator&) = delete;
  ForkedGenerator& operator=(const ForkedGenerator&) = delete;

 private:
  GeneratorState previous_;
};

}  // namespace

void CheckpointFrame::recompute() {
  for (size_t i = 0; i < inputs.size(); ++i)
    KILN_CHECK(inputs[i].version() == input_versions[i], AutogradError,
               "checkpoint: input {} (shape {}) was modified in place after the checkpointed "
               "forward read it (version {}, now {}); backward would recompute from other values. "
               "clone() it before modifying it",
               i, shape_str(inputs[i].shape()), input_versions[i], inputs[i].version());
  std::vector<Tensor> again;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor input = inputs[i].detach();
    if (input_requires_grad[i]) input.requires_grad_(true);
    again.push_back(std::move(input));
  }
  RecomputeHooks hooks(*this);
  {
    EnableGradGuard grad;
    ForkedGenerator generator(rng);
    std::optional<autocast> mixed;
    std::optional<AutocastSuspend> plain;
    if (autocast_enabled)
      mixed.emplace(autocast_dtype);
    else
      plain.emplace();
    SavedTensorHooksGuard guard(hooks);
    const RecomputingGuard recomputing;
    rerun(again);
  }
  KILN_CHECK(hooks.count() == slots.size(), AutogradError,
             "checkpoint: the recomputation saved {} tensors for backward where the forward saved "
             "{}; the checkpointed function must run the same ops when run again",
             hooks.count(), slots.size());
  recomputed = true;
}

Tensor CheckpointFrame::value(size_t index) {
  if (!recomputed) recompute();
  // Defined: the slot's node is alive (it asks), so the recomputation filled the slot.
  const Slot& slot = slots[index];
  KILN_CHECK(slot.value.version() == slot.value_version, AutogradError,
             "checkpoint: tensor {} saved for backward, of shape {}, was modified by an in-place "
             "operation inside the checkpointed function after it was saved; use the out-of-place "
             "form",
             index, shape_str(slot.shape));
  return slot.value;
}

CheckpointForward::CheckpointForward(const std::vector<Tensor>& inputs,
                                     std::function<void(const std::vector<Tensor>&)> rerun) {
  if (!GradMode::is_enabled()) return;
  frame_ = std::make_shared<CheckpointFrame>();
  for (const Tensor& input : inputs) {
    KILN_CHECK(input.defined(), ValueError, "checkpoint: input {} is an undefined tensor",
               frame_->inputs.size());
    frame_->inputs.push_back(input.detach());
    frame_->input_requires_grad.push_back(input.requires_grad());
    frame_->input_versions.push_back(input.version());
  }
  frame_->rerun = std::move(rerun);
  frame_->rng = default_generator().state();
  frame_->autocast_enabled = is_autocast_enabled();
  frame_->autocast_dtype = autocast_dtype();
  hooks_ = std::make_unique<ForwardHooks>(frame_);
  guard_.emplace(*hooks_);
}

CheckpointForward::~CheckpointForward() = default;

}  // namespace kiln::detail
