// profiler::Profiler: torch.profiler.profile with a schedule. The training loop calls step() once
// per iteration; the schedule says what each step does (torch.profiler.ProfilerAction): nothing,
// warm up (recorded and thrown away, so that the tracer's start-up stays out of the trace) or
// record. At the end of each cycle's last recorded step, on_trace_ready gets that cycle's profile,
// stopped: its events, key_averages() and export_chrome_trace() as any Profile's.
//
//   profiler::Profiler prof(profiler::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/3,
//                                              /*repeat=*/2),
//                           profiler::chrome_trace_handler("traces"));  // traces/trace_0.json, ...
//   for (Batch& batch : loader) {
//     train_step(batch);
//     prof.step();
//   }
//   prof.stop();  // or its destructor
//
// Step n is the time between the n-th call of step() and the next (step 0 begins at the
// construction). While a profile records, each step is a range "ProfilerStep#n" on the thread that
// calls step(), as in PyTorch (key_averages makes them one row, "ProfilerStep*"). stop(), and the
// destructor, end a cycle cut short in its recorded steps as PyTorch does: on_trace_ready gets
// what it recorded (a destructor swallows what the handler throws; call stop() to see it). A
// warm-up cut short is thrown away. Recording is profiler::Profile's, for every thread, one at a
// time: another Profile recording when a cycle starts makes step() throw. A Profiler is driven
// from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kiln/core/profiler.h"

namespace kiln::profiler {

// What a step does: torch.profiler.ProfilerAction.
enum class ProfilerAction {
  none,             // nothing is recorded
  warmup,           // recorded and thrown away
  record,           // recorded
  record_and_save,  // recorded; the cycle's last step: its end hands the trace to on_trace_ready
};
const char* action_name(ProfilerAction action);

// The action of step n = 0, 1, 2, ...
using Schedule = std::function<ProfilerAction(int64_t step)>;

// torch.profiler.schedule(wait, warmup, active, repeat, skip_first): skip_first steps of none,
// then cycles of `wait` steps of none, `warmup` of warmup and `active` recorded ones (the last
// record_and_save); `repeat` cycles, then none for ever (0: cycles for ever). Throws ValueError
// unless active > 0 and the others are non-negative.
Schedule schedule(int64_t wait, int64_t warmup, int64_t active, int64_t repeat = 0,
                  int64_t skip_first = 0);

// Gets each finished cycle's profile (stopped) and the cycle's number: 0, 1, ...
using TraceHandler = std::function<void(const Profile& trace, int64_t cycle)>;

// Writes each cycle's Chrome trace to <dir>/<prefix>_<cycle>.json, creating the folder (a prefix
// per rank keeps a distributed job's traces apart).
TraceHandler chrome_trace_handler(std::string dir, std::string prefix = "trace");

class Profiler {
 public:
  // Starts at step 0; throws ValueError for an empty schedule (for one profile from start to stop,
  // use profiler::Profile).
  explicit Profiler(Schedule schedule, TraceHandler on_trace_ready = {},
                    ProfileOptions options = {});
  ~Profiler();  // stop(), swallowing what it throws
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Ends step step_num() and begins the next: stops, hands on or throws away a profile and starts
  // another as the schedule's actions change. Throws ValueError after stop(); rethrows what
  // on_trace_ready throws, after starting the next step.
  void step();
  // Ends the current step and recording (a recorded cycle cut short goes to on_trace_ready); a
  // second stop() does nothing.
  void stop();

  int64_t step_num() const { return step_; }
  ProfilerAction current_action() const { return action_; }
  bool stopped() const { return stopped_; }
  int64_t cycles() const { return cycles_; }  // profiles handed to on_trace_ready so far
  // The last cycle's profile (null before the first), for a loop without a handler.
  const Profile* last_trace() const { return last_.get(); }

 private:
  // From the current action to `next` (nullopt: stopping).
  void transit(std::optional<ProfilerAction> next);
  void begin_recording();

  Schedule schedule_;
  TraceHandler on_trace_ready_;
  ProfileOptions options_;
  int64_t step_ = 0;
  ProfilerAction action_ = ProfilerAction::none;
  bool stopped_ = false;
  int64_t cycles_ = 0;
  std::unique_ptr<Profile> profile_;  // recording: warm-up or a cycle's steps
  std::optional<RecordFunction> step_range_;
  std::unique_ptr<Profile> last_;
};

}  // namespace kiln::profiler
