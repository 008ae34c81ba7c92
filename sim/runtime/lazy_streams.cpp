// Lazy streams (sim/runtime/lazy_streams.h): each lazy stream's queue of nodes, run when waited
// for. One recursive lock orders every queue and every run: a node runs with it held, so two host
// threads waiting for one stream run its nodes once and in order, and a node that itself waits
// (a library stand-in's own copies) does not deadlock.
#include "kiln/sim/runtime/lazy_streams.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kiln/sim/runtime/state.h"

namespace kiln::sim::runtime {

namespace {

struct Pending {
  int device = 0;
  bool blocking = true;
  std::deque<GraphNode> nodes;
  unsigned long long queued = 0;  // nodes ever queued; nodes.front() is number queued - size
};

struct Queues {
  std::recursive_mutex mutex;
  std::map<cudaStream_t, Pending> streams;
};

Queues& queues() {
  static Queues* state = new Queues;  // never destroyed, as the devices
  return *state;
}

// Restores the calling thread's current device after a node ran on its own.
class DeviceScope {
 public:
  explicit DeviceScope(int device) : saved_(current_device()) { current_device() = device; }
  ~DeviceScope() { current_device() = saved_; }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int saved_;
};

std::atomic<bool>& lazy_flag() {
  static std::atomic<bool> flag = [] {
    const char* text = std::getenv("KILN_SIM_LAZY_STREAMS");
    if (text == nullptr || *text == '\0') return true;
    const std::string value(text);
    if (value != "0" && value != "1")
      throw std::invalid_argument("KILN_SIM_LAZY_STREAMS: expected 0 or 1, got '" + value + "'");
    return value == "1";
  }();
  return flag;
}

// With the lock held.
void run_locked(cudaStream_t stream, unsigned long long mark) {
  Queues& q = queues();
  for (;;) {
    auto it = q.streams.find(stream);
    if (it == q.streams.end() || it->second.nodes.empty()) return;
    Pending& pending = it->second;
    const unsigned long long first = pending.queued - pending.nodes.size();
    if (first >= mark) return;
    GraphNode node = std::move(pending.nodes.front());
    pending.nodes.pop_front();
    const DeviceScope scope(node.device);
    node.run();
  }
}

}  // namespace

bool lazy_streams() {
  return lazy_flag().load(std::memory_order_relaxed);
}

void set_lazy_streams(bool lazy) {
  if (!lazy) run_all_deferred();
  lazy_flag().store(lazy, std::memory_order_relaxed);
}

bool is_lazy(cudaStream_t stream) {
  return stream != nullptr && stream != cudaStreamLegacy && stream != cudaStreamPerThread &&
         lazy_streams();
}

void defer(cudaStream_t stream, GraphNode node) {
  Queues& q = queues();
  const std::lock_guard<std::recursive_mutex> lock(q.mutex);
  auto [it, fresh] = q.streams.try_emplace(stream);
  if (fresh) {
    it->second.device = stream->device;
    it->second.blocking = (stream->flags & cudaStreamNonBlocking) == 0;
  }
  it->second.nodes.push_back(std::move(node));
  ++it->second.queued;
}

unsigned long long deferred_mark(cudaStream_t stream) {
  Queues& q = queues();
  const std::lock_guard<std::recursive_mutex> lock(q.mutex);
  auto it = q.streams.find(stream);
  return it == q.streams.end() ? 0 : it->second.queued;
}

void run_deferred(cudaStream_t stream, unsigned long long mark) {
  Queues& q = queues();
  const std::lock_guard<std::recursive_mutex> lock(q.mutex);
  run_locked(stream, mark);
}

void run_deferred_on_device(int device, bool blocking_only) {
  Queues& q = queues();
  const std::lock_guard<std::recursive_mutex> lock(q.mutex);
  std::vector<cudaStream_t> streams;
  for (const auto& [stream, pending] : q.streams)
    if (pending.device == device && !pending.nodes.empty() && (pending.blocking || !blocking_only))
      streams.push_back(stream);
  for (cudaStream_t stream : streams) run_locked(stream, ~0ull);
}

void run_all_deferred() {
  Queues& q = queues();
  const std::lock_guard<std::recursive_mutex> lock(q.mutex);
  std::vector<cudaStream_t> streams;
  for (const auto& [stream, pending] : q.streams)
    if (!pending.nodes.empty()) streams.push_back(stream);
  for (cudaStream_t stream : streams) run_locked(stream, ~0ull);
}

void note_event(cudaEvent_t event, cudaStream_t stream) {
  Queues& q = queues();
  const std::lock_guard<std::recursive_mutex> lock(q.mutex);
  const bool lazy = is_lazy(stream);
  event->lazy_stream = lazy ? stream : nullptr;
  auto it = lazy ? q.streams.find(stream) : q.streams.end();
  event->lazy_mark = it == q.streams.end() ? 0 : it->second.queued;
}

void run_event(cudaEvent_t event) {
  Queues& q = queues();
  const std::lock_guard<std::recursive_mutex> lock(q.mutex);
  if (event->lazy_stream != nullptr) run_locked(event->lazy_stream, event->lazy_mark);
}

void forget_stream(cudaStream_t stream) {
  Queues& q = queues();
  const std::lock_guard<std::recursive_mutex> lock(q.mutex);
  run_locked(stream, ~0ull);
  q.streams.erase(stream);
}

}  // namespace kiln::sim::runtime
