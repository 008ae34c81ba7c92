// Stream capture (sim/runtime/capture.h): the captures under way, the rules CUDA sets for calls
// made during one, and the capture entry points of cudart (cudaStreamBeginCapture,
// cudaStreamEndCapture, cudaStreamIsCapturing, cudaStreamGetCaptureInfo,
// cudaThreadExchangeStreamCaptureMode).
//
// CUDA's rules, as the runtime API's documentation and the programming guide's "Prohibited and
// Unhandled Operations" give them:
// - capture starts on a stream other than the legacy one, and ends on the same stream, from the
//   same thread unless the capture's mode is relaxed;
// - work queued on a capturing stream is recorded, not run; a stream that waits for an event
//   recorded in a capture joins that capture (a fork), and every stream that joined must be waited
//   for by the origin stream again before the end (a join), else cudaErrorStreamCaptureUnjoined;
// - synchronising or querying a capturing stream or a captured event, waiting for a device one of
//   whose streams captures, using the legacy stream while a blocking stream of its device captures,
//   waiting in a capture for an event recorded outside it: errors that invalidate the capture;
// - the "potentially unsafe" calls (cudaMalloc, cudaFree, synchronous copies, queries...) are
//   forbidden to a thread by its interaction mode (cudaThreadExchangeStreamCaptureMode, global by
//   default): global forbids them while this thread captures in a mode other than relaxed or any
//   thread captures in global mode; thread-local only the former; relaxed never.
// An invalidated capture refuses further work (cudaErrorStreamCaptureInvalidated) until
// cudaStreamEndCapture, which then returns that error and no graph.
#include "kiln/sim/runtime/capture.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/sim/runtime/graph.h"
#include "kiln/sim/runtime/lazy_streams.h"
#include "kiln/sim/runtime/state.h"

namespace kiln::sim::runtime {

struct Capture {
  unsigned long long id = 0;
  cudaStream_t origin = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  int device = 0;
  std::string invalidated_by;  // the call that invalidated it; empty while it is valid
  struct Recorded {
    GraphNode node;
    std::vector<std::size_t> dependencies;
  };
  std::vector<Recorded> nodes;
  // Every stream taking part, and the nodes its next node will depend on.
  std::map<cudaStream_t, std::vector<std::size_t>> frontier;
};

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<Capture>> active;
  // active.size(), read without the lock: calls made while nothing captures (nearly all of them)
  // skip the lock.
  std::atomic<std::size_t> count{0};
  unsigned long long next_id = 1;
};

Registry& registry() {
  static Registry* state = new Registry;  // never destroyed, as the devices
  return *state;
}

cudaStreamCaptureMode& thread_mode() {
  thread_local cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  return mode;
}

bool is_legacy(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy;
}

const char* mode_name(cudaStreamCaptureMode mode) {
  switch (mode) {
    case cudaStreamCaptureModeGlobal:
      return "global";
    case cudaStreamCaptureModeThreadLocal:
      return "thread-local";
    case cudaStreamCaptureModeRelaxed:
      return "relaxed";
  }
  return "unknown";
}

std::string describe(const Capture& c) {
  std::ostringstream text;
  text << "capture " << c.id << " of stream " << static_cast<const void*>(c.origin) << " on device "
       << c.device << ", " << mode_name(c.mode) << " mode";
  return text.str();
}

// The rest run with the registry's lock held.

void invalidate(Capture& c, const std::string& why) {
  if (c.invalidated_by.empty()) c.invalidated_by = why;
}

Capture* find(unsigned long long id) {
  for (auto& c : registry().active)
    if (c->id == id) return c.get();
  return nullptr;
}

// The captures of `device` with a blocking stream (one made without cudaStreamNonBlocking) taking
// part: the legacy stream of that device implicitly waits for them.
std::vector<Capture*> blocking_captures(int device) {
  std::vector<Capture*> out;
  for (auto& c : registry().active)
    for (auto& [stream, frontier] : c->frontier)
      if (stream->device == device && (stream->flags & cudaStreamNonBlocking) == 0) {
        out.push_back(c.get());
        break;
      }
  return out;
}

cudaError_t implicit(const char* function, const std::vector<Capture*>& captures) {
  for (Capture* c : captures) invalidate(*c, std::string(function) + " on the legacy stream");
  return fail(cudaErrorStreamCaptureImplicit,
              std::string("operation would make the legacy stream depend on a capturing blocking "
                          "stream (kiln-sim: ") +
                  function + " on the legacy stream of device " + std::to_string(current_device()) +
                  " during " + describe(*captures.front()) +
                  ", whose stream was made without cudaStreamNonBlocking)");
}

cudaError_t invalidated(const char* function, const Capture& c) {
  return fail(cudaErrorStreamCaptureInvalidated,
              std::string("operation failed due to a previous error during capture (kiln-sim: ") +
                  function + " on a stream of " + describe(c) + ", invalidated by " +
                  c.invalidated_by + "; end it with cudaStreamEndCapture)");
}

// The captures that forbid this thread the potentially unsafe calls now.
std::vector<Capture*> forbidding_captures() {
  std::vector<Capture*> out;
  const cudaStreamCaptureMode mode = thread_mode();
  if (mode == cudaStreamCaptureModeRelaxed) return out;
  const std::thread::id self = std::this_thread::get_id();
  for (auto& c : registry().active) {
    const bool own = c->thread == self && c->mode != cudaStreamCaptureModeRelaxed;
    const bool global = mode == cudaStreamCaptureModeGlobal && c->thread != self &&
                        c->mode == cudaStreamCaptureModeGlobal;
    if (own || global) out.push_back(c.get());
  }
  return out;
}

cudaError_t unsafe_locked(const char* function) {
  const std::vector<Capture*> forbidding = forbidding_captures();
  if (forbidding.empty()) return cudaSuccess;
  for (Capture* c : forbidding) invalidate(*c, function);
  return fail(cudaErrorStreamCaptureUnsupported,
              std::string("operation not permitted when stream is capturing (kiln-sim: ") +
                  function + " is potentially unsafe during " + describe(*forbidding.front()) +
                  ", and this thread's interaction mode is " + mode_name(thread_mode()) +
                  "; cudaThreadExchangeStreamCaptureMode with cudaStreamCaptureModeRelaxed "
                  "permits it)");
}

cudaError_t unsupported_on(const char* function, Capture& c, const char* what) {
  invalidate(c, function);
  return fail(cudaErrorStreamCaptureUnsupported,
              std::string("operation not permitted when stream is capturing (kiln-sim: ") +
                  function + " " + what + " during " + describe(c) + ")");
}

// Every node the origin's frontier depends on, directly or not.
std::set<std::size_t> joined_nodes(const Capture& c) {
  std::set<std::size_t> seen;
  std::vector<std::size_t> todo = c.frontier.at(c.origin);
  while (!todo.empty()) {
    const std::size_t n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    for (std::size_t d : c.nodes[n].dependencies) todo.push_back(d);
  }
  return seen;
}

}  // namespace

namespace {

Queue capture_queue_on(const char* function, cudaStream_t stream) {
  Registry& r = registry();
  if (r.count.load(std::memory_order_acquire) == 0) return {};
  std::lock_guard<std::mutex> lock(r.mutex);
  if (is_legacy(stream)) {
    const std::vector<Capture*> blocking = blocking_captures(current_device());
    if (blocking.empty()) return {};
    return {Queue::fail, implicit(function, blocking)};
  }
  if (stream == cudaStreamPerThread || stream->capture == nullptr) return {};
  if (!stream->capture->invalidated_by.empty())
    return {Queue::fail, invalidated(function, *stream->capture)};
  return {Queue::record, cudaSuccess};
}

}  // namespace

// Outside a capture, work on a lazy stream is recorded too, into the stream's own queue
// (sim/runtime/lazy_streams.h); work on the legacy or per-thread stream first waits for the
// device's blocking streams, as CUDA's legacy stream does.
Queue queue_on(const char* function, cudaStream_t stream) {
  const Queue queue = capture_queue_on(function, stream);
  if (queue.action != Queue::run) return queue;
  if (is_lazy(stream)) return {Queue::record, cudaSuccess};
  if (lazy_streams()) run_deferred_on_device(stream_device(stream), true);
  return queue;
}

void record(cudaStream_t stream, GraphNode node) {
  std::unique_lock<std::mutex> lock(registry().mutex);
  if (stream->capture == nullptr) {
    lock.unlock();
    defer(stream, std::move(node));
    return;
  }
  Capture& c = *stream->capture;
  std::vector<std::size_t>& frontier = c.frontier[stream];
  c.nodes.push_back({std::move(node), frontier});
  frontier = {c.nodes.size() - 1};
}

cudaError_t check_unsafe_call(const char* function) {
  Registry& r = registry();
  if (r.count.load(std::memory_order_acquire) == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(r.mutex);
  return unsafe_locked(function);
}

cudaError_t check_synchronous_call(const char* function) {
  Registry& r = registry();
  if (r.count.load(std::memory_order_acquire) == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::vector<Capture*> blocking = blocking_captures(current_device());
  if (!blocking.empty()) return implicit(function, blocking);
  return unsafe_locked(function);
}

cudaError_t check_device_wait(const char* function, int device) {
  Registry& r = registry();
  if (r.count.load(std::memory_order_acquire) == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(r.mutex);
  Capture* first = nullptr;
  for (auto& c : r.active)
    if (c->device == device) {
      invalidate(*c, function);
      if (!first) first = c.get();
    }
  if (first)
    return unsupported_on(function, *first, "waits for a device one of whose streams captures");
  return unsafe_locked(function);
}

cudaError_t check_stream_wait(const char* function, cudaStream_t stream) {
  Registry& r = registry();
  if (r.count.load(std::memory_order_acquire) == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (is_legacy(stream)) {
    const std::vector<Capture*> blocking = blocking_captures(current_device());
    if (!blocking.empty()) return implicit(function, blocking);
  } else if (stream != cudaStreamPerThread && stream->capture != nullptr) {
    return unsupported_on(function, *stream->capture, "on a capturing stream");
  }
  return unsafe_locked(function);
}

cudaError_t check_event_wait(const char* function, cudaEvent_t event) {
  const unsigned long long id = event->captured_by.load(std::memory_order_acquire);
  Registry& r = registry();
  if (id == 0 && r.count.load(std::memory_order_acquire) == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (id != 0) {
    if (Capture* c = find(id)) invalidate(*c, function);
    return fail(cudaErrorCapturedEvent,
                std::string("operation not permitted on an event last recorded in a capturing "
                            "stream (kiln-sim: ") +
                    function + " on an event recorded during capture " + std::to_string(id) + ")");
  }
  return unsafe_locked(function);
}

cudaError_t capture_event_record(cudaEvent_t event, cudaStream_t stream, bool external,
                                 bool* handled) {
  *handled = false;
  Registry& r = registry();
  if (r.count.load(std::memory_order_acquire) == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (is_legacy(stream)) {
    const std::vector<Capture*> blocking = blocking_captures(current_device());
    *handled = !blocking.empty();
    return blocking.empty() ? cudaSuccess : implicit("cudaEventRecord", blocking);
  }
  if (stream == cudaStreamPerThread || stream->capture == nullptr) return cudaSuccess;
  *handled = true;
  Capture& c = *stream->capture;
  if (!c.invalidated_by.empty()) return invalidated("cudaEventRecord", c);
  std::vector<std::size_t>& frontier = c.frontier[stream];
  if (external) {
    // An event node: each launch of the graph records the event, which the host and streams
    // outside the graph may then wait for.
    GraphNode node{"cudaEventRecordWithFlags(cudaEventRecordExternal)", stream->device, [event] {
                     event->recorded = true;
                     event->time = std::chrono::steady_clock::now();
                   }};
    c.nodes.push_back({std::move(node), frontier});
    frontier = {c.nodes.size() - 1};
    event->captured_by.store(0, std::memory_order_release);
    return cudaSuccess;
  }
  event->capture_dependencies = frontier;
  event->captured_by.store(c.id, std::memory_order_release);
  return cudaSuccess;
}

cudaError_t capture_stream_wait(cudaStream_t stream, cudaEvent_t event, unsigned flags,
                                bool* handled) {
  *handled = false;
  const unsigned long long id = event->captured_by.load(std::memory_order_acquire);
  Registry& r = registry();
  if (id == 0 && r.count.load(std::memory_order_acquire) == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(r.mutex);
  const bool legacy = is_legacy(stream) || stream == cudaStreamPerThread;
  Capture* waiting = legacy ? nullptr : stream->capture;
  if (id != 0) {
    *handled = true;
    Capture* c = find(id);
    if (c == nullptr)
      return fail(cudaErrorCapturedEvent,
                  "operation not permitted on an event last recorded in a capturing stream "
                  "(kiln-sim: cudaStreamWaitEvent on an event of capture " +
                      std::to_string(id) + ", which has ended)");
    if (!c->invalidated_by.empty()) return invalidated("cudaStreamWaitEvent", *c);
    if (legacy) return implicit("cudaStreamWaitEvent", {c});
    if (waiting != nullptr && waiting != c) {
      invalidate(*c, "cudaStreamWaitEvent");
      invalidate(*waiting, "cudaStreamWaitEvent");
      return fail(cudaErrorStreamCaptureMerge,
                  "operation would result in a merge of separate capture sequences (kiln-sim: "
                  "cudaStreamWaitEvent of a stream of " +
                      describe(*waiting) + " for an event of " + describe(*c) + ")");
    }
    // A fork when the stream was not capturing (it joins the capture), a join or a merge of
    // dependencies when it was.
    stream->capture = c;
    std::vector<std::size_t>& frontier = c->frontier[stream];
    for (std::size_t n : event->capture_dependencies)
      if (std::find(frontier.begin(), frontier.end(), n) == frontier.end()) frontier.push_back(n);
    return cudaSuccess;
  }
  if (legacy) {
    const std::vector<Capture*> blocking = blocking_captures(current_device());
    *handled = !blocking.empty();
    return blocking.empty() ? cudaSuccess : implicit("cudaStreamWaitEvent", blocking);
  }
  if (waiting == nullptr) return cudaSuccess;
  *handled = true;
  if (!waiting->invalidated_by.empty()) return invalidated("cudaStreamWaitEvent", *waiting);
  if ((flags & cudaEventWaitExternal) == 0) {
    invalidate(*waiting, "cudaStreamWaitEvent");
    return fail(cudaErrorStreamCaptureIsolation,
                "dependency created on uncaptured work in another stream (kiln-sim: "
                "cudaStreamWaitEvent of a stream of " +
                    describe(*waiting) +
                    " for an event recorded outside it; cudaEventWaitExternal makes it a wait "
                    "node)");
  }
  // A wait node: it waits for nothing at launch. Work a lazy stream still keeps for the event then
  // runs only when something outside the graph waits for it (sim/runtime/lazy_streams.h).
  std::vector<std::size_t>& frontier = waiting->frontier[stream];
  waiting->nodes.push_back(
      {GraphNode{"cudaStreamWaitEvent(cudaEventWaitExternal)", stream->device, [] {}}, frontier});
  frontier = {waiting->nodes.size() - 1};
  return cudaSuccess;
}

void forget_capture(cudaEvent_t event) {
  event->captured_by.store(0, std::memory_order_release);
}

}  // namespace kiln::sim::runtime

namespace {

namespace rt = kiln::sim::runtime;

cudaError_t invalid(const char* function, const std::string& why) {
  return rt::fail(cudaErrorInvalidValue,
                  std::string("invalid argument (kiln-sim: ") + function + ": " + why + ")");
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  rt::use_context();
  if (rt::is_legacy(stream) || stream == cudaStreamPerThread)
    return invalid("cudaStreamBeginCapture",
                   "capture on the legacy stream is not supported by CUDA, and on the per-thread "
                   "default stream not by the simulator: use a created stream");
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return invalid("cudaStreamBeginCapture", "unknown capture mode " + std::to_string(mode));
  rt::Registry& r = rt::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (stream->capture != nullptr)
    return rt::fail(cudaErrorIllegalState,
                    "the operation cannot be performed in the present state (kiln-sim: "
                    "cudaStreamBeginCapture on a stream already taking part in " +
                        rt::describe(*stream->capture) + ")");
  auto c = std::make_unique<rt::Capture>();
  c->id = r.next_id++;
  c->origin = stream;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->device = stream->device;
  c->frontier[stream] = {};
  stream->capture = c.get();
  r.active.push_back(std::move(c));
  r.count.store(r.active.size(), std::memory_order_release);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  rt::use_context();
  *pGraph = nullptr;
  if (rt::is_legacy(stream) || stream == cudaStreamPerThread)
    return rt::fail(cudaErrorIllegalState,
                    "the operation cannot be performed in the present state (kiln-sim: "
                    "cudaStreamEndCapture on a default stream, which never captures)");
  rt::Registry& r = rt::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  rt::Capture* c = stream->capture;
  if (c == nullptr)
    return rt::fail(cudaErrorIllegalState,
                    "the operation cannot be performed in the present state (kiln-sim: "
                    "cudaStreamEndCapture on a stream that is not capturing)");
  if (c->origin != stream)
    return rt::fail(cudaErrorStreamCaptureUnmatched,
                    "the capture was not initiated in this stream (kiln-sim: cudaStreamEndCapture "
                    "on a stream that joined " +
                        rt::describe(*c) + ")");
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return rt::fail(cudaErrorStreamCaptureWrongThread,
                    "a stream capture sequence not initiated with cudaStreamCaptureModeRelaxed "
                    "was passed to cudaStreamEndCapture in a different thread (kiln-sim: " +
                        rt::describe(*c) + ")");
  // Whatever the outcome, every stream leaves the capture.
  for (auto& [s, frontier] : c->frontier) s->capture = nullptr;
  auto it = std::find_if(r.active.begin(), r.active.end(),
                         [c](const std::unique_ptr<rt::Capture>& a) { return a.get() == c; });
  std::unique_ptr<rt::Capture> ended = std::move(*it);
  r.active.erase(it);
  r.count.store(r.active.size(), std::memory_order_release);
  if (!ended->invalidated_by.empty())
    return rt::fail(cudaErrorStreamCaptureInvalidated,
                    "operation failed due to a previous error during capture (kiln-sim: " +
                        rt::describe(*ended) + " was invalidated by " + ended->invalidated_by +
                        "; no graph)");
  const std::set<std::size_t> joined = rt::joined_nodes(*ended);
  if (joined.size() != ended->nodes.size()) {
    std::size_t first = 0;
    while (joined.count(first)) ++first;
    return rt::fail(cudaErrorStreamCaptureUnjoined,
                    "capture sequence contains a fork that was not joined to the primary stream "
                    "(kiln-sim: " +
                        rt::describe(*ended) + ": node " + std::to_string(first) + ", " +
                        ended->nodes[first].node.what +
                        ", was queued on a stream that the origin stream never waited for again)");
  }
  auto* graph = new CUgraph_st;
  graph->device = ended->device;
  for (auto& recorded : ended->nodes) graph->nodes.push_back(std::move(recorded.node));
  *pGraph = graph;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream,
                                            enum cudaStreamCaptureStatus* pCaptureStatus) {
  return cudaStreamGetCaptureInfo(stream, pCaptureStatus);
}

cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream,
                                               enum cudaStreamCaptureStatus* captureStatus_out,
                                               unsigned long long* id_out, cudaGraph_t* graph_out,
                                               const cudaGraphNode_t** dependencies_out,
                                               const cudaGraphEdgeData** edgeData_out,
                                               size_t* numDependencies_out) {
  rt::use_context();
  if (captureStatus_out == nullptr)
    return invalid("cudaStreamGetCaptureInfo", "captureStatus_out is required");
  if (graph_out != nullptr || dependencies_out != nullptr || edgeData_out != nullptr)
    return rt::fail(cudaErrorNotSupported,
                    "operation not supported (kiln-sim: cudaStreamGetCaptureInfo answers the "
                    "status, the id and the number of dependencies; the graph being captured and "
                    "its node handles are not simulated)");
  rt::Registry& r = rt::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  *captureStatus_out = cudaStreamCaptureStatusNone;
  if (rt::is_legacy(stream) || stream == cudaStreamPerThread) {
    const std::vector<rt::Capture*> blocking = rt::blocking_captures(rt::current_device());
    if (!blocking.empty())
      // Only the answer fails: the capture is not invalidated by the question.
      return rt::fail(cudaErrorStreamCaptureImplicit,
                      "operation would make the legacy stream depend on a capturing blocking "
                      "stream (kiln-sim: cudaStreamGetCaptureInfo on the legacy stream during " +
                          rt::describe(*blocking.front()) + ")");
    return cudaSuccess;
  }
  const rt::Capture* c = stream->capture;
  if (c == nullptr) return cudaSuccess;
  *captureStatus_out = c->invalidated_by.empty() ? cudaStreamCaptureStatusActive
                                                 : cudaStreamCaptureStatusInvalidated;
  if (id_out != nullptr) *id_out = c->id;
  if (numDependencies_out != nullptr) *numDependencies_out = c->frontier.at(stream).size();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  if (mode == nullptr) return invalid("cudaThreadExchangeStreamCaptureMode", "a null mode");
  if (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
      *mode != cudaStreamCaptureModeRelaxed)
    return invalid("cudaThreadExchangeStreamCaptureMode",
                   "unknown capture mode " + std::to_string(*mode));
  std::swap(*mode, rt::thread_mode());
  return cudaSuccess;
}

}  // extern "C"
