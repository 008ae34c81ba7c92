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
  if (enabled() && step == warmup_) profile_.emplace();
}

void StepProfile::after_step(int64_t step) {
  if (!profile_ || !profile_->recording()) return;
  ++profiled_;
  if (step + 1 == warmup_ + steps_) report(nullptr);
}

void StepProfile::end_of_epoch() {
  if (profile_ && profile_->recording()) report("epoch");
}

void StepProfile::finish() {
  if (profile_ && profile_->recording()) {
    report("run");
  } else if (enabled() && !profile_ && lead_) {
    std::printf(
        "--profile-steps: the run ended after %lld steps, before the %lld of warm-up were done; "
        "nothing was profiled\n",
        static_cast<long long>(steps_seen_), static_cast<long long>(warmup_));
  }
}

void StepProfile::report(const char* ended_first) {
  profile_->stop();
  if (!lead_) return;
  const profiler::KeyAverages averages = profile_->key_averages();
  const std::string sort = averages.has_gpu ? "self_gpu_ms" : "self_host_ms";
  const std::string table = averages.table({.sort_by = sort, .row_limit = 25});
  const std::string shortfall =
      ended_first ? fmt::format("; {} were asked for, but the {} ended first", steps_, ended_first)
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
       << profile_->key_averages(true).table({.sort_by = sort});
  file.close();
  KILN_CHECK(file.good(), Error, "--profile-steps: cannot write {}", table_path);
  const std::string trace_path = RunDir::path_in(dir_, "trace.json");
  profile_->export_chrome_trace(trace_path);
  std::printf("profile: %s, %s\n", table_path.c_str(), trace_path.c_str());
}

}  // namespace kiln::apps
