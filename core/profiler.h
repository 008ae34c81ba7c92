// The profiler: where a step's time and memory go, per op, as torch.profiler.profile. While a
// profiler::Profile is recording, every op entry point (an OpScope at its top), every autograd
// node the engine runs in backward, and every user range (RecordFunction) becomes an Event with
// its host interval, its thread, its nesting, the input shapes and dtypes, the device, the bytes
// the allocators handed out and took back while it was the innermost event, and on CUDA its GPU
// interval from two events on the current stream. Ops that ran inside a backward node carry the
// node's name. Communication and fused work are events too, carrying the bytes they work on
// (Event::bytes): each collective (dist::all_reduce, ...), each DDP bucket's all-reduce, the
// GradScaler's unscale and the fused optimizer steps. A DataLoader's worker threads record their
// own events ("DataLoader: fetch batch", "read_image", "decode_image", each transform by name,
// "collate"), and the loop's side of it is "DataLoader::next".
//
//   profiler::Profile prof;                   // records from here, on every thread
//   {
//     profiler::RecordFunction range("forward");
//     loss = cross_entropy(model.forward(x), y);
//   }
//   loss.backward();
//   prof.stop();
//   std::puts(prof.key_averages().table({.sort_by = "self_host_ms"}).c_str());
//   prof.export_chrome_trace("trace.json");   // open in Perfetto or chrome://tracing
//
// The table's footer gives, per thread, the time inside its top-level events against the profiled
// (wall) time; self times, and so the "self %" column, add up over threads. To profile some steps
// of a training loop (skip, wait, warm up, record, repeat; a callback per recorded cycle), see
// profiler::Profiler in core/profiler_schedule.h (torch.profiler's schedule and on_trace_ready).
//
// With no Profile recording, an OpScope costs one relaxed atomic load and a branch that is always
// taken the same way, and the few thread-local stores that name the op (core/op_name.h). In a CUDA
// build, ops and ranges are also NVTX ranges while recording, so
// Nsight tools that work show kiln's names.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/op_name.h"
#include "kiln/core/tensor.h"

namespace kiln::profiler {

namespace detail {
// Whether a Profile is recording: read on every op, written when one starts and stops.
inline std::atomic<bool> recording{false};
}  // namespace detail

// False in a build configured with KILN_PROFILER=OFF, where the hooks compile to nothing (a
// Profile then records no event): the baseline the hooks' cost is measured against.
#ifdef KILN_NO_PROFILER
inline constexpr bool kHooksBuilt = false;
#else
inline constexpr bool kHooksBuilt = true;
#endif

inline bool is_recording() {
  return kHooksBuilt && detail::recording.load(std::memory_order_relaxed);
}

enum class EventKind {
  op,             // an op entry point
  backward_node,  // an autograd node run by the engine
  user_range,     // a RecordFunction
};
const char* kind_name(EventKind kind);

struct Event {
  std::string name;
  EventKind kind = EventKind::op;
  int thread = 0;  // 0 for the thread that started the profile, then 1, 2, ... as threads record
  int depth = 0;   // open events on the same thread around this one
  int64_t parent = -1;   // index of the enclosing event in Profile::events(), or -1
  int64_t start_ns = 0;  // host time since the profile started
  int64_t end_ns = 0;
  std::string shapes;             // "[128, 3, 32, 32], [64, 3, 3, 3], []" (undefined inputs as [])
  std::string dtypes;             // "f32, f32, -"
  Device device = Device::cpu();  // the first defined input's
  std::string node;               // the backward node it ran inside, or empty
  int64_t allocated_bytes = 0;    // by the allocators while this was the innermost event
  int64_t freed_bytes = 0;
  int64_t allocations = 0;
  // The GPU interval (milliseconds since the profile's first GPU event, on the op's stream), or
  // negative when the op ran on the CPU or GPU timing was off.
  double gpu_start_ms = -1.0;
  double gpu_ms = -1.0;
  uint64_t stream = 0;  // the CUDA stream it was timed on (its handle as a number; 0: default)
  // The data it carries, where its scope says (0 for the rest): a collective's tensor, a DDP
  // bucket, the gradients the GradScaler unscales, the parameters a fused optimizer step updates.
  int64_t bytes = 0;

  double host_ms() const { return static_cast<double>(end_ns - start_ns) * 1e-6; }
};

struct ProfileOptions {
  bool record_shapes = true;  // the shapes and dtypes of each op's inputs
  bool cuda_timing = true;    // GPU intervals for ops on CUDA tensors (two events per op)
};

// One row of key_averages: the events of one name (and, grouped by shape, one input shape).
struct OpStats {
  std::string name;
  std::string shapes;  // empty unless grouped by shape
  EventKind kind = EventKind::op;
  int64_t calls = 0;
  double host_ms = 0, self_host_ms = 0;  // total, and without the events nested in it
  double gpu_ms = 0, self_gpu_ms = 0;    // 0 when nothing ran on a GPU
  int64_t allocated_bytes = 0;           // self: while it was the innermost event
  int64_t freed_bytes = 0;
  int64_t bytes = 0;  // the events' Event::bytes, summed
};

struct TableOptions {
  // Column to sort by, largest first: "calls", "host_ms", "self_host_ms", "gpu_ms",
  // "self_gpu_ms", "allocated_bytes" or "name" (ascending).
  std::string sort_by = "self_host_ms";
  int row_limit = 0;  // 0: every row
};

// One thread's time inside its top-level (depth 0) events: at most the profile's wall time.
struct ThreadTime {
  int thread = 0;  // Event::thread
  double busy_ms = 0;
  int64_t events = 0;  // its events, nested ones included
};

struct KeyAverages {
  std::vector<OpStats> rows;
  double wall_ms = 0;    // the profile's host duration: the base of the "%" column
  bool has_gpu = false;  // whether any event has a GPU interval
  bool by_shape = false;
  bool has_bytes = false;  // whether any event carries Event::bytes (the table's "data MB")
  // The threads that recorded events, by number: the footer's figures.
  std::vector<ThreadTime> threads;
  // A fixed-width text table; throws ValueError for an unknown sort column.
  std::string table(const TableOptions& options = {}) const;
};

class Profile {
 public:
  // Starts recording; throws ValueError while another Profile records (there is one at a time,
  // for all threads).
  explicit Profile(ProfileOptions options = {});
  ~Profile();  // stops, if still recording
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  // Stops recording and gathers every thread's events (waiting for the GPU when it timed any).
  // Events still open (a RecordFunction alive across stop) end at the stop.
  void stop();
  bool recording() const { return recording_; }

  // In order of start, per thread; thread 0 first. Valid after stop().
  const std::vector<Event>& events() const;
  double wall_ms() const;
  // Per name (and input shapes with group_by_shape), over ops, backward nodes and user ranges.
  KeyAverages key_averages(bool group_by_shape = false) const;
  // Chrome's trace format: host events per thread ("ph": "X"), GPU intervals per device and
  // stream, with shapes, dtypes, node and memory in "args". Written atomically.
  void export_chrome_trace(const std::string& path) const;
  std::string chrome_trace_json() const;

  // Every allocation and free the allocators reported while recording, on any thread and inside
  // an event or not (the events' own figures count only what happened while they were innermost).
  struct MemoryTotals {
    int64_t allocated_bytes = 0;
    int64_t freed_bytes = 0;
    int64_t allocations = 0;
    int64_t frees = 0;
  };
  MemoryTotals memory_totals() const;

 private:
  void check_stopped(const char* what) const;
  ProfileOptions options_;
  bool recording_ = false;
  int64_t wall_ns_ = 0;
  std::vector<Event> events_;
  MemoryTotals memory_;
};

// Opens an event of `kind` on this thread for its scope, when a Profile is recording; does nothing
// otherwise (one branch).
class Scope {
 public:
  Scope(const char* name, EventKind kind) {
    if (is_recording()) open(name, kind, {}, Device::cpu(), 0);
  }
  Scope(const char* name, std::initializer_list<const Tensor*> inputs, int64_t bytes = 0) {
    if (is_recording()) open(name, EventKind::op, inputs, Device::cpu(), bytes);
  }
  // An op over many tensors (a fused optimizer step, the GradScaler's unscale): its device and the
  // bytes it works on, without input shapes.
  Scope(const char* name, Device device, int64_t bytes) {
    if (is_recording()) open(name, EventKind::op, {}, device, bytes);
  }
  ~Scope() {
    if (open_) close();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  // The device is the first defined input's, or `device` when there is none.
  void open(const char* name, EventKind kind, std::initializer_list<const Tensor*> inputs,
            Device device, int64_t bytes);
  void close();
  bool open_ = false;
  uint64_t session_ = 0;  // the profile it opened in: a later one's events are not its to close
  // Its event, so that it closes its own even when scopes end out of order (a range held across
  // Profiler::step(), which ends the step's range while it is open).
  int thread_ = -1;
  size_t index_ = 0;
};

// An op entry point's event: its name and inputs, and for a collective the bytes it carries. It
// also names the op for errors raised below it, profiling or not (core/op_name.h).
class OpScope : public Scope {
 public:
  OpScope(const char* op, std::initializer_list<const Tensor*> inputs, int64_t bytes = 0)
      : Scope(op, inputs, bytes), name_(op) {}
  OpScope(const char* op, Device device, int64_t bytes) : Scope(op, device, bytes), name_(op) {}

 private:
  OpNameScope name_;
};

// A named range of the user's (record_function("data") in PyTorch).
class RecordFunction : public Scope {
 public:
  explicit RecordFunction(const std::string& name) : Scope(name.c_str(), EventKind::user_range) {}
  // A literal's name: no std::string is built, so the cost when not recording stays one load.
  explicit RecordFunction(const char* name) : Scope(name, EventKind::user_range) {}
};

// Memory seen by the allocators (Allocator::record_allocate / record_free); cheap when not
// recording.
void on_allocate(int64_t bytes);
void on_free(int64_t bytes);

}  // namespace kiln::profiler
