// Checkpoints as safetensors files: a model's state_dict alone, or a whole training state (model,
// optimizer, scheduler, position, random state) in one file.
//
// A training checkpoint names its tensors "model.<name>" and "optimizer.<key>"; the position,
// scheduler step and generator state go in the header's metadata, so `kiln-checkpoint show` and
// Python's safetensors can read every part.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/core/generator.h"
#include "kiln/nn/module.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"

namespace kiln::nn {

// Writes module.state_dict() atomically (temporary file, fsync, rename).
void save_state_dict(const Module& module, const std::string& path);
// Loads a file written by save_state_dict (or by PyTorch's safetensors.torch.save_file) into
// module, strictly unless strict is false; tensors go to each parameter's own device. A tensor of
// another dtype is converted, as PyTorch's load_state_dict does, and said so on stderr (and in the
// result's converted_keys).
LoadResult load_state_dict(Module& module, const std::string& path, bool strict = true);

// Where training stands: the epoch in progress and how many of its batches are done.
struct TrainingPosition {
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  int64_t global_step = 0;
};

struct TrainingState {
  Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;  // may be null
  Generator* generator = nullptr;           // may be null; usually &default_generator()
  TrainingPosition position;
};

void save_training_checkpoint(const std::string& path, const TrainingState& state);
// Restores every part that is non-null in `state` and returns the saved position. Resuming is
// strict: the file must hold every part `state` asks for, every model tensor with the model's
// exact dtype and shape, and optimizer state of its parameters' dtypes; anything else throws
// before the model or optimizer is touched. Whether the position fits the run (epochs, batches)
// is the caller's to check: only it knows them.
TrainingPosition load_training_checkpoint(const std::string& path, TrainingState& state);

}  // namespace kiln::nn
