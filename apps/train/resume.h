// What kiln-train checks before it continues a run from a checkpoint: the saved position and
// schedule step must fit this run's epochs and batches, or the run would silently skip an epoch
// or freeze its learning rate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/train/checkpoint.h"

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

// Throws ValueError naming the checkpoint, the field and both numbers when `p` is not a position
// of a run of length `run`, or the saved scheduler step lies past where this run's would be.
void check_resume_position(const std::string& path, const train::TrainingPosition& p,
                           std::optional<int64_t> scheduler_step, const RunLength& run);

}  // namespace kiln::apps
