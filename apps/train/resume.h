// What kiln-train checks before it continues a run from a checkpoint: the recipe must be the one
// the saved state was made with (or differ only where that is safe), and the saved position and
// schedule step must fit this run's epochs and batches, or the run would silently skip an epoch,
// freeze its learning rate or drop the loss scaler's state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/module.h"
#include "kiln/nn/safetensors.h"
#include "kiln/train/checkpoint.h"
#include "recipe.h"

namespace kiln::apps {

struct RunLength {
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  // The scheduler's step count after a position, if there is a scheduler: per batch it stops at
  // the last step of the run, per epoch it counts finished epochs.
  bool scheduled = false;
  bool per_batch_schedule = true;
  int64_t scheduler_step_at(const train::TrainingPosition& p) const;
};

// The settings of `r` (its stem resolved: "small" or "imagenet"), the job's size and the data's
// identity (its folder, and an image folder's class names in label order) that a checkpoint records
// as its recipe.
nn::Metadata recipe_metadata(const Recipe& r, int world_size,
                             const std::vector<std::string>& class_names);

// Compares the recipe a checkpoint was saved with to this run's. A change to what the saved state
// depends on (model, data set, its class names, batch size, batches per epoch, world size, amp,
// optimizer, schedule, seed) throws ValueError naming the checkpoint, the field and both values;
// a change that is safe (more epochs, another learning rate, augmentation, the data folder's
// path) comes back as a line for the run to print. A checkpoint saved before kiln-train stored
// its recipe, or its class names, comes back as one line saying what was not compared.
std::vector<std::string> check_resume_recipe(const std::string& path, const nn::Metadata& saved,
                                             const nn::Metadata& now);

// Throws ValueError naming the checkpoint and the first parameter or buffer holding a NaN or an
// infinity: a model saved from a run that had diverged would train on as NaN.
void check_finite_model(const std::string& path, const nn::Module& model);

// Throws ValueError naming the checkpoint, the field and both numbers when `p` is not a position
// of a run of length `run`, or the saved scheduler step lies past where this run's would be.
void check_resume_position(const std::string& path, const train::TrainingPosition& p,
                           std::optional<int64_t> scheduler_step, const RunLength& run);

}  // namespace kiln::apps
