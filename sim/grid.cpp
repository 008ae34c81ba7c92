#include "kiln/sim/grid.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kiln/sim/block_runner.h"
#include "kiln/sim/metrics/recorder.h"
#include "kiln/sim/metrics/strict_memory.h"

namespace kiln::sim {

namespace {

std::uint64_t environment_number(const char* name, std::uint64_t fallback, std::uint64_t least) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (*end != '\0' || value < least)
    throw std::invalid_argument(std::string(name) + ": expected a whole number of at least " +
                                std::to_string(least) + ", got '" + text + "'");
  return value;
}

struct ScheduleState {
  std::mutex mutex;
  Schedule schedule;
  ScheduleState() {
    schedule.seed = environment_number("KILN_SIM_SEED", 0, 0);
    const unsigned cores = std::thread::hardware_concurrency();
    schedule.workers =
        static_cast<int>(environment_number("KILN_SIM_WORKERS", cores ? cores : 1, 1));
    schedule.fibers = environment_number("KILN_SIM_FIBERS", 0, 0) != 0;
    schedule.sm_count = static_cast<int>(environment_number("KILN_SIM_SM_COUNT", 0, 0));
    schedule.poison_allocations = environment_number("KILN_SIM_POISON", 1, 0) != 0;
    schedule.compute_capability =
        static_cast<int>(environment_number("KILN_SIM_COMPUTE_CAPABILITY", 90, 10));
    schedule.poison_static_shared = environment_number("KILN_SIM_SHARED_POISON", 1, 0) != 0;
    schedule.hold_global_stores = environment_number("KILN_SIM_HOLD_STORES", 1, 0) != 0;
    schedule.varied_library_sums = environment_number("KILN_SIM_VARIED_SUMS", 1, 0) != 0;
  }
};
ScheduleState& schedule_state() {
  static ScheduleState state;
  return state;
}

// Helper threads that run blocks beside the launching thread, one grid at a time. Each takes the
// next block from a shared counter until none is left or one has failed.
class WorkerPool {
 public:
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    start_.notify_all();
    for (std::thread& helper : helpers_) helper.join();
  }

  void run(const GridLaunch& launch, const Schedule& schedule) {
    std::lock_guard<std::mutex> one_grid(grid_mutex_);
    // Before the grid is published: what it throws (a bad KILN_SIM_METRICS) leaves nothing running.
    metrics::begin_grid(launch.kernel, launch.block.x * launch.block.y * launch.block.z,
                        launch.shared_bytes);
    const std::uint64_t blocks =
        static_cast<std::uint64_t>(launch.grid.x) * launch.grid.y * launch.grid.z;
    const std::size_t helpers = static_cast<std::size_t>(
        std::min<std::uint64_t>(static_cast<std::uint64_t>(schedule.workers) - 1, blocks - 1));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (helpers_.size() < helpers)
        helpers_.emplace_back([this, index = helpers_.size()] { help(index); });
      launch_ = &launch;
      schedule_ = schedule;
      blocks_ = blocks;
      next_ = 0;
      failed_ = false;
      error_ = nullptr;
      participants_ = helpers;
      working_ = helpers;
      ++generation_;
    }
    start_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return working_ == 0; });
    metrics::end_grid();
    strict::end_grid();
    launch_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    BlockRunner& runner = BlockRunner::here();
    const dim3 grid = launch_->grid;
    while (!failed_.load(std::memory_order_relaxed)) {
      const std::uint64_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= blocks_) break;
      const uint3 block{static_cast<unsigned>(i % grid.x),
                        static_cast<unsigned>(i / grid.x % grid.y),
                        static_cast<unsigned>(i / (static_cast<std::uint64_t>(grid.x) * grid.y))};
      try {
        runner.run(*launch_, block, schedule_);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
        failed_ = true;
      }
    }
  }

  void help(std::size_t index) {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      if (index >= participants_) continue;  // fewer blocks than workers, or fewer workers asked
      lock.unlock();
      work();
      lock.lock();
      if (--working_ == 0) done_.notify_all();
    }
  }

  std::mutex grid_mutex_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  std::vector<std::thread> helpers_;
  const GridLaunch* launch_ = nullptr;
  Schedule schedule_;
  std::uint64_t blocks_ = 0;
  std::atomic<std::uint64_t> next_{0};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  std::size_t participants_ = 0;  // helpers running this grid
  std::size_t working_ = 0;       // of those, still running
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
};

WorkerPool& pool() {
  static WorkerPool workers;
  return workers;
}

}  // namespace

Schedule schedule() {
  ScheduleState& state = schedule_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.schedule;
}

int reported_sm_count() {
  const Schedule s = schedule();
  return s.sm_count > 0 ? s.sm_count : s.workers;
}

void set_schedule(const Schedule& schedule) {
  if (schedule.workers < 1)
    throw std::invalid_argument("kiln::sim::set_schedule: workers " +
                                std::to_string(schedule.workers) + ", expected at least 1");
  if (schedule.compute_capability < 10)
    throw std::invalid_argument("kiln::sim::set_schedule: compute_capability " +
                                std::to_string(schedule.compute_capability) +
                                ", expected major * 10 + minor, such as 75 or 90");
  if (schedule.sm_count < 0)
    throw std::invalid_argument("kiln::sim::set_schedule: sm_count " +
                                std::to_string(schedule.sm_count) + ", expected 0 or more");
  ScheduleState& state = schedule_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.schedule = schedule;
}

namespace {
std::atomic<std::uint64_t> grids{0};
std::atomic<std::uint64_t> library{0};

struct LaunchNames {
  std::mutex mutex;
  std::map<std::string, std::uint64_t> counts;
};
LaunchNames& launch_names() {
  static LaunchNames names;
  return names;
}
void count_name(const char* name) {
  LaunchNames& names = launch_names();
  std::lock_guard<std::mutex> lock(names.mutex);
  ++names.counts[name];
}
}  // namespace

std::uint64_t grids_run() {
  return grids.load(std::memory_order_relaxed);
}

void note_library_call(const char* name) {
  library.fetch_add(1, std::memory_order_relaxed);
  count_name(name);
}

std::uint64_t library_calls() {
  return library.load(std::memory_order_relaxed);
}

std::map<std::string, std::uint64_t> launches_by_name() {
  LaunchNames& names = launch_names();
  std::lock_guard<std::mutex> lock(names.mutex);
  return names.counts;
}

void run_grid(const GridLaunch& launch) {
  if (BlockRunner::here().running())
    throw KernelError(std::string("kiln-sim: kernel ") + launch.kernel +
                      " launched from inside a kernel: dynamic parallelism is not simulated");
  grids.fetch_add(1, std::memory_order_relaxed);
  count_name(launch.kernel);
  Schedule s = schedule();
  if (launch.serial) s.workers = 1;
  pool().run(launch, s);
}

}  // namespace kiln::sim
