// What every backend shares: the store of a job from its environment, the choice of backend, and
// the default group behind the free functions (as torch.distributed's module-level functions).
#include "kiln/dist/process_group.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/error.h"
#include "kiln/dist/backends.h"
#include "kiln/dist/env.h"
#include "kiln/dist/store.h"

namespace kiln::dist {

namespace {

struct DefaultGroup {
  std::mutex mutex;
  std::shared_ptr<ProcessGroup> group;
  LaunchEnv env;
  int generation = 0;  // default groups made so far
};

// Never destroyed: a program that does not call destroy_process_group would otherwise destroy
// the group during exit, maybe after the CUDA runtime has shut down, and NCCL's destroy would
// wait there for peers that may be gone. The process's end frees it instead.
DefaultGroup& default_state() {
  static auto* state = new DefaultGroup;
  return *state;
}

// Every rank counts itself in at the store and waits until all have: the one place that knows how
// many ranks are missing, so a rank that waits long says how many and where.
void wait_for_ranks(Store& store, int rank, int size, const std::string& name,
                    std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const std::string key = "kiln/" + name + "/arrived";
  const auto start = Clock::now();
  auto next_report = start + kRendezvousReportAfter;
  for (int64_t arrived = store.add(key, 1); arrived < size; arrived = store.add(key, 0)) {
    const auto waited = Clock::now() - start;
    KILN_CHECK(waited < timeout, DistError,
               "dist: group '{}', rank {} of {}: {} of the {} ranks arrived at the rendezvous ({}) "
               "within {} ms; start every rank, each with its own RANK and the same MASTER_ADDR "
               "and MASTER_PORT",
               name, rank, size, arrived, size, store.where(), timeout.count());
    if (Clock::now() >= next_report) {
      std::fprintf(
          stderr,
          "kiln: dist: rank %d of %d waiting for %lld more rank(s) at the rendezvous (%s, "
          "group '%s'): %lld of %d arrived, %lld s so far\n",
          rank, size, static_cast<long long>(size - arrived), store.where().c_str(), name.c_str(),
          static_cast<long long>(arrived), size,
          static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(waited).count()));
      next_report += kRendezvousReportEvery;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

std::shared_ptr<Store> store_from_env(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  if (!env.master_addr.empty())
    return make_tcp_store(env.master_addr, env.master_port, env.rank == 0, timeout);
  KILN_CHECK(!env.file_store.empty(), ValueError,
             "dist: no rendezvous for a job of {} ranks: set MASTER_ADDR and MASTER_PORT",
             env.world_size);
  return make_file_store(env.file_store, timeout);
}

std::shared_ptr<ProcessGroup> new_process_group(const std::string& backend,
                                                std::shared_ptr<Store> store, int rank, int size,
                                                const std::string& name,
                                                ProcessGroupOptions options) {
  KILN_CHECK(size >= 1 && rank >= 0 && rank < size, ValueError,
             "dist: new_process_group: rank {} of {} is not a rank of the group", rank, size);
  KILN_CHECK(store != nullptr, ValueError, "dist: new_process_group: expected a store, got null");
  if (size > 1) wait_for_ranks(*store, rank, size, name, options.timeout);
  if (backend == "gloo") return make_gloo_group(std::move(store), rank, size, name, options);
  if (backend == "nccl") return make_nccl_group(std::move(store), rank, size, name, options);
  throw ValueError("dist: unknown backend '" + backend + "': expected \"gloo\" or \"nccl\"");
}

std::optional<std::chrono::milliseconds> timeout_from_env() {
  const char* text = std::getenv("KILN_DIST_TIMEOUT");
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  KILN_CHECK(end != text && *end == '\0' && std::isfinite(seconds) && seconds > 0 && seconds <= 1e7,
             ValueError, "dist: KILN_DIST_TIMEOUT: expected seconds, a positive number, got '{}'",
             text);
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000)));
}

bool blocking_wait_from_env() {
  const char* text = std::getenv("KILN_NCCL_BLOCKING_WAIT");
  if (text == nullptr || *text == '\0') return false;
  const std::string value = text;
  KILN_CHECK(value == "0" || value == "1", ValueError,
             "dist: KILN_NCCL_BLOCKING_WAIT: expected 1 (waits block the host and throw a "
             "failure) or 0, got '{}'",
             value);
  return value == "1";
}

void init_process_group(const std::string& backend, ProcessGroupOptions options) {
  DefaultGroup& state = default_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  KILN_CHECK(state.group == nullptr, DistError,
             "dist: init_process_group: the default group already exists ({}); call "
             "destroy_process_group first",
             state.group ? state.group->backend() : "");
  state.env = launch_env();
  if (options.timeout == ProcessGroupOptions::kDefaultTimeout)
    if (const std::optional<std::chrono::milliseconds> t = timeout_from_env()) options.timeout = *t;
  options.blocking_wait = options.blocking_wait || blocking_wait_from_env();
  if (backend == "nccl" && cuda::is_available())
    cuda::set_device(local_device(state.env, cuda::device_count()));
  options.single_machine = state.env.local_world_size == state.env.world_size;
  // Every rank makes its default groups in the same order, so the n-th is named alike on all:
  // a group made after destroy_process_group must not read the keys its predecessor left in a
  // store that outlives it (a file store keeps them, the NCCL id among them).
  state.generation += 1;
  const std::string name =
      state.generation == 1 ? "default" : "default-" + std::to_string(state.generation);
  if (state.env.world_size == 1) {
    // A process of its own: a group of one needs no one to meet, and still runs every call.
    state.group =
        new_process_group(backend, make_memory_store(options.timeout), 0, 1, name, options);
    return;
  }
  state.group = new_process_group(backend, store_from_env(state.env, options.timeout),
                                  state.env.rank, state.env.world_size, name, options);
}

int local_device(const LaunchEnv& env, int device_count) {
  KILN_CHECK(device_count > 0, DistError, "dist: local rank {} needs a GPU, and none is visible",
             env.local_rank);
  if (device_count == 1) return 0;
  return env.local_rank % device_count;
}

bool is_initialized() {
  DefaultGroup& state = default_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.group != nullptr;
}

void destroy_process_group() {
  DefaultGroup& state = default_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.group.reset();
  state.env = LaunchEnv{};
}

std::shared_ptr<ProcessGroup> default_group_ptr() {
  DefaultGroup& state = default_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  KILN_CHECK(state.group != nullptr, DistError,
             "dist: no default process group: call kiln::dist::init_process_group(\"gloo\") or "
             "(\"nccl\") first");
  return state.group;
}

ProcessGroup& default_group() {
  return *default_group_ptr();
}

int get_rank() {
  return is_initialized() ? default_group().rank() : 0;
}
int get_world_size() {
  return is_initialized() ? default_group().size() : 1;
}
int get_local_rank() {
  DefaultGroup& state = default_state();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (state.group) return state.env.local_rank;
  }
  return launch_env().local_rank;
}

void all_reduce(const Tensor& tensor, ReduceOp op) {
  default_group().all_reduce(tensor, op);
}
void broadcast(const Tensor& tensor, int root) {
  default_group().broadcast(tensor, root);
}
void all_gather(const std::vector<Tensor>& outputs, const Tensor& input) {
  default_group().all_gather(outputs, input);
}
void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  default_group().reduce_scatter(output, inputs, op);
}
void barrier() {
  default_group().barrier();
}

}  // namespace kiln::dist
