// kiln-train's --profile-steps: a profiler::Profile around a window of training steps after a
// warm-up, its key-averages table printed and written with a Chrome trace into the checkpoint
// directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/core/profiler.h"

namespace kiln::apps {

class StepProfile {
 public:
  // Profiles steps [warmup, warmup + steps) of this run (counted from 0); steps 0: never. `dir`
  // empty: the table is printed but no file is written. Only a `lead` process prints and writes.
  StepProfile(int64_t warmup, int64_t steps, std::string dir, bool lead);
  bool enabled() const { return steps_ > 0; }
  void before_step(int64_t step);
  void after_step(int64_t step);
  // Training steps only: a profile still recording when its epoch's training ends (fewer steps
  // than asked for were left in it) stops and reports there, before the evaluation runs.
  void end_of_epoch();
  // Stops a profile the run ended inside of (fewer steps than asked for) and reports it, or says
  // that the run ended before the warm-up was over.
  void finish();

 private:
  void report(const char* ended_first);  // null, "epoch" or "run": what cut the window short
  int64_t warmup_, steps_;
  std::string dir_;
  bool lead_;
  int64_t profiled_ = 0;
  int64_t steps_seen_ = 0;
  std::optional<profiler::Profile> profile_;
};

}  // namespace kiln::apps
