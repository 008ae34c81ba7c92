#include "resume.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "kiln/core/error.h"

namespace kiln::apps {

int64_t RunLength::scheduler_step_at(const train::TrainingPosition& p) const {
  if (!per_batch_schedule) return p.epoch;
  // kiln-train steps a per-batch schedule after each batch but the run's last.
  return std::min(p.global_step, std::max<int64_t>(epochs * steps_per_epoch - 1, 0));
}

void check_resume_position(const std::string& path, const train::TrainingPosition& p,
                           std::optional<int64_t> scheduler_step, const RunLength& run) {
  const char* hint =
      "; resume with the recipe that wrote it (batch size, data, --max-batches, "
      "--epochs and --schedule)";
  KILN_CHECK(p.epoch <= run.epochs, ValueError,
             "--resume {}: the checkpoint is at epoch {}, past this run's {} epochs{}", path,
             p.epoch, run.epochs, hint);
  KILN_CHECK(p.batch_in_epoch <= run.steps_per_epoch, ValueError,
             "--resume {}: batch_in_epoch is {}, beyond the {} batches of an epoch{}", path,
             p.batch_in_epoch, run.steps_per_epoch, hint);
  KILN_CHECK(p.epoch < run.epochs || p.batch_in_epoch == 0, ValueError,
             "--resume {}: the checkpoint is {} batches into epoch {} of a {}-epoch run{}", path,
             p.batch_in_epoch, p.epoch + 1, run.epochs, hint);
  const int64_t expected_step = p.epoch * run.steps_per_epoch + p.batch_in_epoch;
  KILN_CHECK(p.global_step == expected_step, ValueError,
             "--resume {}: global_step is {}, but epoch {} batch {} of {}-batch epochs is step "
             "{}{}",
             path, p.global_step, p.epoch + 1, p.batch_in_epoch, run.steps_per_epoch, expected_step,
             hint);
  // A longer run than the one saved (more --epochs) continues a schedule that had stopped at its
  // own end, so the saved step may lag this run's; past it, the schedule would stand still.
  if (run.scheduled && scheduler_step) {
    const int64_t expected = run.scheduler_step_at(p);
    KILN_CHECK(*scheduler_step >= 0 && *scheduler_step <= expected, ValueError,
               "--resume {}: the scheduler is at step {}, but this run's schedule is at step {} "
               "there{}",
               path, *scheduler_step, expected, hint);
  }
}

}  // namespace kiln::apps
