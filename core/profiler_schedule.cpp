// The scheduled profiler: torch.profiler's schedule and its transitions between actions
// (torch/profiler/profiler.py, profile._transit_action), on top of one profiler::Profile per
// warm-up and per recorded cycle.
#include "kiln/core/profiler_schedule.h"

#include <fmt/format.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "kiln/core/error.h"

namespace kiln::profiler {

namespace {

bool is_recorded(ProfilerAction action) {
  return action == ProfilerAction::record || action == ProfilerAction::record_and_save;
}

}  // namespace

const char* action_name(ProfilerAction action) {
  switch (action) {
    case ProfilerAction::none:
      return "none";
    case ProfilerAction::warmup:
      return "warmup";
    case ProfilerAction::record:
      return "record";
    case ProfilerAction::record_and_save:
      return "record_and_save";
  }
  return "?";
}

Schedule schedule(int64_t wait, int64_t warmup, int64_t active, int64_t repeat,
                  int64_t skip_first) {
  KILN_CHECK(active > 0, ValueError,
             "profiler::schedule: active must be at least 1 (the steps recorded per cycle), got {}",
             active);
  KILN_CHECK(wait >= 0 && warmup >= 0 && repeat >= 0 && skip_first >= 0, ValueError,
             "profiler::schedule: wait, warmup, repeat and skip_first must be non-negative, got "
             "wait={}, warmup={}, repeat={}, skip_first={}",
             wait, warmup, repeat, skip_first);
  return [=](int64_t step) {
    KILN_CHECK(step >= 0, ValueError, "profiler::schedule: expected a step >= 0, got {}", step);
    if (step < skip_first) return ProfilerAction::none;
    step -= skip_first;
    const int64_t cycle = wait + warmup + active;
    if (repeat > 0 && step / cycle >= repeat) return ProfilerAction::none;
    const int64_t at = step % cycle;
    if (at < wait) return ProfilerAction::none;
    if (at < wait + warmup) return ProfilerAction::warmup;
    return at < cycle - 1 ? ProfilerAction::record : ProfilerAction::record_and_save;
  };
}

TraceHandler chrome_trace_handler(std::string dir, std::string prefix) {
  KILN_CHECK(!dir.empty(), ValueError,
             "profiler::chrome_trace_handler: expected a folder, got \"\"");
  return [dir = std::move(dir), prefix = std::move(prefix)](const Profile& trace, int64_t cycle) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    KILN_CHECK(!error, Error, "profiler::chrome_trace_handler: cannot create {}: {}", dir,
               error.message());
    trace.export_chrome_trace(
        (std::filesystem::path(dir) / fmt::format("{}_{}.json", prefix, cycle)).string());
  };
}

Profiler::Profiler(Schedule schedule, TraceHandler on_trace_ready, ProfileOptions options)
    : schedule_(std::move(schedule)),
      on_trace_ready_(std::move(on_trace_ready)),
      options_(options) {
  KILN_CHECK(static_cast<bool>(schedule_), ValueError,
             "profiler::Profiler: expected a schedule (profiler::schedule(wait, warmup, active, "
             "...) or a function of the step), got an empty one; to record from start to stop, use "
             "profiler::Profile");
  const ProfilerAction first = schedule_(0);
  if (first != ProfilerAction::none) begin_recording();
  action_ = first;
  if (profile_) step_range_.emplace(fmt::format("ProfilerStep#{}", step_));
}

Profiler::~Profiler() {
  try {
    stop();
  } catch (...) {
    // A destructor must not throw: a handler's error for a cut-short cycle is lost here.
  }
}

void Profiler::begin_recording() {
  profile_ = std::make_unique<Profile>(options_);
}

void Profiler::step() {
  KILN_CHECK(!stopped_, ValueError,
             "profiler::Profiler::step: the profiler was stopped at step {}; expected step() "
             "before stop()",
             step_);
  const ProfilerAction next = schedule_(step_ + 1);
  ++step_;
  transit(next);
}

void Profiler::stop() {
  if (stopped_) return;
  stopped_ = true;
  transit(std::nullopt);
}

void Profiler::transit(std::optional<ProfilerAction> next) {
  step_range_.reset();
  const ProfilerAction from = action_;
  action_ = next.value_or(ProfilerAction::none);
  // A cycle ends after its last step, or cut short when the schedule (or stop) leaves recording.
  const bool cycle_ends = from == ProfilerAction::record_and_save ||
                          (from == ProfilerAction::record && !(next && is_recorded(*next)));
  // A warm-up is thrown away when recording proper begins (a fresh profile), or ends without it.
  const bool warmup_ends = from == ProfilerAction::warmup && next != ProfilerAction::warmup;
  std::unique_ptr<Profile> finished;
  // No profile when starting it threw (another Profile was recording).
  if ((cycle_ends || warmup_ends) && profile_) {
    profile_->stop();
    if (cycle_ends) finished = std::move(profile_);
    profile_.reset();
  }
  std::exception_ptr handler_error;
  if (finished) {
    const int64_t cycle = cycles_++;
    if (on_trace_ready_) {
      try {
        on_trace_ready_(*finished, cycle);
      } catch (...) {
        handler_error = std::current_exception();
      }
    }
    last_ = std::move(finished);
  }
  if (next && *next != ProfilerAction::none && !profile_) begin_recording();
  if (profile_) step_range_.emplace(fmt::format("ProfilerStep#{}", step_));
  if (handler_error) std::rethrow_exception(handler_error);
}

}  // namespace kiln::profiler
