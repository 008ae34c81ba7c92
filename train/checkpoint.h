// Training checkpoints: a whole training state (model, optimizer, scheduler, position in the run,
// random state) in one safetensors file, to continue a run exactly where it stopped. The weights
// alone are nn/state_dict.h's.
//
// A training checkpoint names its tensors "model.<name>", "optimizer.<key>" and "scaler.<key>"
// (GradScaler's state); the position, scheduler step and generator state go in the header's
// metadata, so `kiln-checkpoint show` and Python's safetensors can read every part. So does the
// recipe, the settings a program says its state depends on ("recipe.<key>"), for it to compare
// when it resumes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/core/generator.h"
#include "kiln/nn/module.h"
#include "kiln/nn/safetensors.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"

namespace kiln::train {

// Where training stands: the epoch in progress and how many of its batches are done.
struct TrainingPosition {
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  int64_t global_step = 0;
};

struct TrainingState {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;  // may be null
  Generator* generator = nullptr;           // may be null; usually &default_generator()
  TrainingPosition position{};
  // May be null; a disabled one has no state to save. Last, so that initializers of the fields
  // above still read {model, optimizer, scheduler, generator, position}.
  optim::GradScaler* scaler = nullptr;
  // Saved with the state and read back by training_checkpoint_recipe(), not by
  // load_training_checkpoint(): the program compares it with its own before resuming.
  nn::Metadata recipe{};  // {}: initializers that stop before it need not name it
};

void save_training_checkpoint(const std::string& path, const TrainingState& state);
// Restores every part that is non-null in `state` and returns the saved position. Resuming is
// strict: the file must hold every part `state` asks for, every model tensor with the model's
// exact dtype and shape, and optimizer state of its parameters' dtypes; anything else throws
// before the model or optimizer is touched. Whether the position fits the run (epochs, batches)
// is the caller's to check: only it knows them.
TrainingPosition load_training_checkpoint(const std::string& path, TrainingState& state);
// The recipe a training checkpoint was saved with (TrainingState::recipe), keys without their
// "recipe." prefix; empty for a checkpoint saved without one.
nn::Metadata training_checkpoint_recipe(const std::string& path);

// Where the run a training checkpoint was saved from stood, read from the file without loading
// anything: its position, and its scheduler's step when it was saved with a scheduler. A program
// checks them against its own run before load_training_checkpoint.
struct TrainingCheckpointPlace {
  TrainingPosition position{};
  std::optional<int64_t> scheduler_step;
};
TrainingCheckpointPlace training_checkpoint_place(const std::string& path);

}  // namespace kiln::train
