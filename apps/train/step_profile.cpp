#include "step_profile.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include "kiln/core/error.h"
#include "run_dir.h"

namespace kiln::apps {

StepProfile::StepProfile(int64_t warmup, int64_t steps, std::string dir, bool lead)
    : warmup_(warmup), steps_(steps), dir_(std::move(dir)), lead_(lead) {}

void StepProfile::before_step(int64_t step) {
  steps_seen_ = step + 1;
  if (!enabled()) return;
  if (!profiler_) {
    // One cycle: the warm-up's steps unrecorded but the last, which warms the profiler up
    // (recorded and thrown away), then the profiled ones.
    const int64_t warming = warmup_ > 0 ? 1 : 0;
    profiler_.emplace(profiler::schedule(warmup_ - warming, warming, steps_, /*repeat=*/1),
                      [this](const profiler::Profile& profile, int64_t) { report(profile); });
  } else if (!profiler_->stopped()) {
    profiler_->step();
  }
}

bool StepProfile::recording() const {
  if (!profiler_ || profiler_->stopped()) return false;
  const profiler::ProfilerAction action = profiler_->current_action();
  return action == profiler::ProfilerAction::record ||
         action == profiler::ProfilerAction::record_and_save;
}

void StepProfile::after_step(int64_t) {
  if (!recording()) return;
  // The window ends with its last step, before the DataLoader's wait for the next batch.
  if (++profiled_ == steps_) stop(nullptr);
}

void StepProfile::stop(const char* ended_first) {
  ended_first_ = ended_first;
  profiler_->stop();
}

void StepProfile::end_of_epoch() {
  if (recording()) stop("epoch");
}

void StepProfile::finish() {
  if (recording()) {
    stop("run");
  } else if (enabled() && (!profiler_ || profiler_->cycles() == 0) && lead_) {
    std::printf(
        "--profile-steps: the run ended after %lld steps, before the %lld of warm-up were done; "
        "nothing was profiled\n",
        static_cast<long long>(steps_seen_), static_cast<long long>(warmup_));
  }
  if (profiler_) profiler_->stop();
}

void StepProfile::report(const profiler::Profile& profile) {
  if (!lead_) return;
  const profiler::KeyAverages averages = profile.key_averages();
  const std::string sort = averages.has_gpu ? "self_gpu_ms" : "self_host_ms";
  const std::string table = averages.table({.sort_by = sort, .row_limit = 25});
  const std::string shortfall =
      ended_first_
          ? fmt::format("; {} were asked for, but the {} ended first", steps_, ended_first_)
          : "";
  std::printf("profile of %lld training steps (after %lld of warm-up%s), by %s:\n%s",
              static_cast<long long>(profiled_), static_cast<long long>(warmup_), shortfall.c_str(),
              sort.c_str(), table.c_str());
  if (dir_.empty()) {
    std::printf("(no --checkpoint-dir: profile.txt and trace.json not written)\n");
    return;
  }
  const std::string table_path = RunDir::path_in(dir_, "profile.txt");
  std::ofstream file(table_path, std::ios::trunc);
  file << averages.table({.sort_by = sort}) << "\nby input shape:\n"
       << profile.key_averages(true).table({.sort_by = sort});
  file.close();
  KILN_CHECK(file.good(), Error, "--profile-steps: cannot write {}", table_path);
  const std::string trace_path = RunDir::path_in(dir_, "trace.json");
  profile.export_chrome_trace(trace_path);
  std::printf("profile: %s, %s\n", table_path.c_str(), trace_path.c_str());
}

}  // namespace kiln::apps
