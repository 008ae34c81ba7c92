// The profiler's recording: one session at a time, a buffer per thread that records in it (its own
// mutex, so stop() can gather while other threads still close events), and the CUDA events that
// time GPU work. key_averages and the Chrome trace are in core/profiler_report.cpp.
#include "kiln/core/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/error.h"

namespace kiln::profiler {

namespace {

using Clock = std::chrono::steady_clock;

// The two timing events of a GPU op, recorded on the stream current when it opened and closed.
struct GpuMarks {
  std::shared_ptr<cuda::Event> start, end;
};

struct ThreadBuffer {
  std::mutex mutex;
  int thread = 0;
  bool gathered = false;  // stop() has taken the events: later closes do nothing
  std::vector<Event> events;
  std::vector<GpuMarks> gpu;  // parallel to events
  std::vector<size_t> open;   // indices of the open events, innermost last
};

struct Session {
  uint64_t generation = 0;
  ProfileOptions options;
  Clock::time_point start;
  std::mutex mutex;  // guards buffers and gpu_base
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  // Per device: the first event recorded there, which GPU intervals are measured from.
  std::map<int, std::shared_ptr<cuda::Event>> gpu_base;
  std::atomic<int64_t> allocated_bytes{0}, freed_bytes{0}, allocations{0}, frees{0};
};

std::mutex session_mutex;
std::shared_ptr<Session> session;  // non-null while a Profile records
uint64_t last_generation = 0;      // guarded by session_mutex

thread_local std::shared_ptr<ThreadBuffer> thread_buffer;
thread_local uint64_t thread_generation = 0;

int64_t now_ns(const Session& s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s.start).count();
}

// This thread's buffer in the recording session (registering the thread on its first event), with
// the session; nulls when none records.
std::pair<ThreadBuffer*, std::shared_ptr<Session>> current() {
  std::lock_guard<std::mutex> lock(session_mutex);
  if (!session) return {nullptr, nullptr};
  if (thread_generation != session->generation || !thread_buffer) {
    auto buffer = std::make_shared<ThreadBuffer>();
    std::lock_guard<std::mutex> session_lock(session->mutex);
    buffer->thread = static_cast<int>(session->buffers.size());
    session->buffers.push_back(buffer);
    thread_buffer = buffer;
    thread_generation = session->generation;
  }
  return {thread_buffer.get(), session};
}

std::string describe_inputs(std::initializer_list<const Tensor*> inputs, bool dtypes) {
  std::string out;
  for (const Tensor* t : inputs) {
    if (!out.empty()) out += ", ";
    if (!t->defined())
      out += dtypes ? "-" : "[]";
    else
      out += dtypes ? dtype_name(t->dtype()) : shape_str(t->shape());
  }
  return out;
}

// Records a timing event on the current stream of `device`; the first one of a device becomes its
// base.
std::shared_ptr<cuda::Event> gpu_mark(Session& s, Device device) {
  cuda::DeviceGuard guard(device.index);
  auto event = std::make_shared<cuda::Event>(true);
  std::lock_guard<std::mutex> lock(s.mutex);
  auto [it, inserted] = s.gpu_base.try_emplace(device.index);
  if (inserted) {
    it->second = std::make_shared<cuda::Event>(true);
    it->second->record();
  }
  event->record();
  return event;
}

}  // namespace

const char* kind_name(EventKind kind) {
  switch (kind) {
    case EventKind::op:
      return "op";
    case EventKind::backward_node:
      return "backward";
    case EventKind::user_range:
      return "range";
  }
  return "?";
}

void Scope::open(const char* name, EventKind kind, std::initializer_list<const Tensor*> inputs,
                 Device device, int64_t bytes) {
  auto [buffer, s] = current();
  if (!buffer) return;
  Event e;
  e.name = name;
  e.kind = kind;
  e.thread = buffer->thread;
  e.device = device;
  e.bytes = bytes;
  for (const Tensor* t : inputs) {
    if (t->defined()) {
      e.device = t->device();
      break;
    }
  }
  if (s->options.record_shapes && inputs.size() > 0) {
    e.shapes = describe_inputs(inputs, false);
    e.dtypes = describe_inputs(inputs, true);
  }
  GpuMarks marks;
  if (e.device.is_cuda() && s->options.cuda_timing) {
    marks.start = gpu_mark(*s, e.device);
    e.stream = reinterpret_cast<uintptr_t>(cuda::current_stream(e.device.index).handle());
  }
  std::lock_guard<std::mutex> lock(buffer->mutex);
  if (buffer->gathered) return;
  e.depth = static_cast<int>(buffer->open.size());
  if (!buffer->open.empty()) {
    const Event& parent = buffer->events[buffer->open.back()];
    e.parent = static_cast<int64_t>(buffer->open.back());
    e.node = parent.kind == EventKind::backward_node ? parent.name : parent.node;
  }
  e.start_ns = now_ns(*s);
  buffer->open.push_back(buffer->events.size());
  buffer->events.push_back(std::move(e));
  buffer->gpu.push_back(std::move(marks));
  cuda::nvtx_range_push(name);
  open_ = true;
  session_ = s->generation;
  thread_ = buffer->thread;
  index_ = buffer->open.back();
}

void Scope::close() {
  open_ = false;
  cuda::nvtx_range_pop();
  auto [buffer, s] = current();
  if (!buffer || s->generation != session_) return;
  const int64_t end = now_ns(*s);
  // Closed on another thread than it opened on: its event ends at the stop.
  if (buffer->thread != thread_) return;
  std::lock_guard<std::mutex> lock(buffer->mutex);
  if (buffer->gathered) return;
  const auto it = std::find(buffer->open.rbegin(), buffer->open.rend(), index_);
  if (it == buffer->open.rend()) return;
  const size_t i = index_;
  buffer->open.erase(std::next(it).base());
  buffer->events[i].end_ns = end;
  if (buffer->gpu[i].start) buffer->gpu[i].end = gpu_mark(*s, buffer->events[i].device);
}

namespace {

void on_memory(int64_t bytes, bool allocated) {
  auto [buffer, s] = current();
  if (!buffer) return;
  (allocated ? s->allocated_bytes : s->freed_bytes).fetch_add(bytes);
  (allocated ? s->allocations : s->frees).fetch_add(1);
  std::lock_guard<std::mutex> lock(buffer->mutex);
  if (buffer->gathered || buffer->open.empty()) return;
  Event& e = buffer->events[buffer->open.back()];
  if (allocated) {
    e.allocated_bytes += bytes;
    ++e.allocations;
  } else {
    e.freed_bytes += bytes;
  }
}

}  // namespace

void on_allocate(int64_t bytes) {
  if (is_recording()) on_memory(bytes, true);
}

void on_free(int64_t bytes) {
  if (is_recording()) on_memory(bytes, false);
}

Profile::Profile(ProfileOptions options) : options_(options) {
  {
    std::lock_guard<std::mutex> lock(session_mutex);
    KILN_CHECK(!session, ValueError,
               "profiler::Profile: another Profile is recording; stop() it first (one profile "
               "records every thread)");
    auto s = std::make_shared<Session>();
    s->generation = ++last_generation;
    s->options = options;
    s->start = Clock::now();
    session = s;
    recording_ = true;
    detail::recording.store(true, std::memory_order_relaxed);
  }
  current();  // the starting thread is thread 0
}

Profile::~Profile() {
  if (!recording_) return;
  try {
    stop();
  } catch (...) {
    // A destructor must not throw; the events are lost with the object anyway.
  }
}

void Profile::stop() {
  if (!recording_) return;
  std::shared_ptr<Session> s;
  {
    std::lock_guard<std::mutex> lock(session_mutex);
    detail::recording.store(false, std::memory_order_relaxed);
    s = std::move(session);
    session.reset();
  }
  recording_ = false;
  wall_ns_ = now_ns(*s);
  memory_ = {s->allocated_bytes.load(), s->freed_bytes.load(), s->allocations.load(),
             s->frees.load()};
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    buffers = s->buffers;
  }
  for (const auto& [device, base] : s->gpu_base) cuda::synchronize(device);
  events_.clear();
  for (const auto& buffer : buffers) {
    std::lock_guard<std::mutex> lock(buffer->mutex);
    buffer->gathered = true;
    const auto offset = static_cast<int64_t>(events_.size());
    for (size_t i : buffer->open) buffer->events[i].end_ns = wall_ns_;
    for (size_t i = 0; i < buffer->events.size(); ++i) {
      Event e = std::move(buffer->events[i]);
      if (e.parent >= 0) e.parent += offset;
      const GpuMarks& marks = buffer->gpu[i];
      if (marks.start && marks.end) {
        const cuda::Event& base = *s->gpu_base.at(e.device.index);
        e.gpu_start_ms = base.elapsed_time(*marks.start);
        e.gpu_ms = marks.start->elapsed_time(*marks.end);
      }
      events_.push_back(std::move(e));
    }
  }
}

void Profile::check_stopped(const char* what) const {
  KILN_CHECK(!recording_, ValueError, "profiler::Profile::{}: stop() the profile first", what);
}

const std::vector<Event>& Profile::events() const {
  check_stopped("events");
  return events_;
}

Profile::MemoryTotals Profile::memory_totals() const {
  check_stopped("memory_totals");
  return memory_;
}

double Profile::wall_ms() const {
  check_stopped("wall_ms");
  return static_cast<double>(wall_ns_) * 1e-6;
}

}  // namespace kiln::profiler
