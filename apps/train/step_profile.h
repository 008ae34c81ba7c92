// kiln-train's --profile-steps: a profiler::Profiler around a window of training steps after a
// warm-up (its last step warms the profiler up, recorded and thrown away), its key-averages table
// printed and written with a Chrome trace into the checkpoint directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/core/profiler.h"
#include "kiln/core/profiler_schedule.h"

namespace kiln::apps {

class StepProfile {
 public:
  // Profiles steps [warmup, warmup + steps) of this run (counted from 0); steps 0: never. `dir`
  // empty: the table is printed but no file is written. Only a `lead` process prints and writes.
  StepProfile(int64_t warmup, int64_t steps, std::string dir, bool lead);
  bool enabled() const { return steps_ > 0; }
  // A profiled step runs from its before_step to the next (the DataLoader's wait included), the
  // window's last to its after_step.
  void before_step(int64_t step);
  void after_step(int64_t step);
  // Training steps only: a profile still recording when its epoch's training ends (fewer steps
  // than asked for were left in it) stops and reports there, before the evaluation runs.
  void end_of_epoch();
  // Stops a profile the run ended inside of (fewer steps than asked for) and reports it, or says
  // that the run ended before the warm-up was over.
  void finish();

 private:
  bool recording() const;  // in a profiled step
  void stop(const char* ended_first);
  void report(const profiler::Profile& profile);
  int64_t warmup_, steps_;
  std::string dir_;
  bool lead_;
  int64_t profiled_ = 0;
  int64_t steps_seen_ = 0;
  const char* ended_first_ = nullptr;  // null, "epoch" or "run": what cut the window short
  std::optional<profiler::Profiler> profiler_;
};

}  // namespace kiln::apps
