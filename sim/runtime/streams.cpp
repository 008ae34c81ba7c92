// Streams and events. Work runs in order, at once on the default streams and, with lazy streams
// (sim/runtime/lazy_streams.h), when waited for on the others: a query or a wait runs what it
// waits for and answers cudaSuccess, and an event holds the host time it was recorded at.
// A stream or event belongs to the device current when it was made; recording an event on another
// device's stream is CUDA's invalid-handle error. During a stream capture (sim/runtime/capture.h)
// queries and waits follow CUDA's rules, events carry dependencies between captured streams, and
// host functions are recorded.
#include <cuda_runtime_api.h>

#include <chrono>
#include <ratio>
#include <string>

#include "kiln/sim/runtime/capture.h"
#include "kiln/sim/runtime/lazy_streams.h"
#include "kiln/sim/runtime/state.h"

namespace {

namespace rt = kiln::sim::runtime;

cudaError_t invalid_handle(const char* function, const std::string& why) {
  return rt::fail(cudaErrorInvalidResourceHandle,
                  std::string("invalid resource handle (kiln-sim: ") + function + ": " + why + ")");
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* stream) {
  kiln::sim::runtime::use_context();
  *stream = new CUstream_st{rt::current_device(), cudaStreamDefault};
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  kiln::sim::runtime::use_context();
  *stream = new CUstream_st{rt::current_device(), flags};
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  kiln::sim::runtime::use_context();
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return invalid_handle("cudaStreamDestroy", "the default stream cannot be destroyed");
  if (stream->capture != nullptr)
    return rt::fail(cudaErrorStreamCaptureUnsupported,
                    "operation not permitted when stream is capturing (kiln-sim: "
                    "cudaStreamDestroy of a capturing stream; end the capture first)");
  rt::forget_stream(stream);  // a GPU finishes the work queued before the destroy
  delete stream;
  return cudaSuccess;
}

namespace {

// A wait for or query of `stream`: runs its queued work (on a default stream, the blocking
// streams' of its device, which the legacy stream waits for).
cudaError_t wait_stream(const char* function, cudaStream_t stream) {
  if (const cudaError_t error = rt::check_stream_wait(function, stream)) return error;
  if (rt::is_lazy(stream))
    rt::run_deferred(stream);
  else if (rt::lazy_streams())
    rt::run_deferred_on_device(rt::stream_device(stream), true);
  return cudaSuccess;
}

}  // namespace

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  kiln::sim::runtime::use_context();
  return wait_stream("cudaStreamSynchronize", stream);
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) {
  kiln::sim::runtime::use_context();
  return wait_stream("cudaStreamQuery", stream);
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                          unsigned int flags) {
  kiln::sim::runtime::use_context();
  if (event == nullptr) return invalid_handle("cudaStreamWaitEvent", "a null event");
  bool handled = false;
  const cudaError_t captured = rt::capture_stream_wait(stream, event, flags, &handled);
  if (handled) return captured;
  rt::run_event(event);  // the stream's later work comes after the event's, so run that now
  return cudaSuccess;
}

// The host function runs now, on the calling thread: the work queued before it has finished. On a
// capturing stream it is a node of the graph, run at each launch.
cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  kiln::sim::runtime::use_context();
  const rt::Queue queue = rt::queue_on("cudaLaunchHostFunc", stream);
  if (queue.action == rt::Queue::fail) return queue.error;
  if (queue.action == rt::Queue::record) {
    rt::record(stream,
               {"host function", rt::stream_device(stream), [fn, user_data] { fn(user_data); }});
    return cudaSuccess;
  }
  fn(user_data);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* event) {
  kiln::sim::runtime::use_context();
  *event = new CUevent_st{rt::current_device(), cudaEventDefault};
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  kiln::sim::runtime::use_context();
  *event = new CUevent_st{rt::current_device(), flags};
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  kiln::sim::runtime::use_context();
  if (event == nullptr) return invalid_handle("cudaEventDestroy", "a null event");
  delete event;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                               unsigned int flags) {
  kiln::sim::runtime::use_context();
  if (event == nullptr) return invalid_handle("cudaEventRecord", "a null event");
  if ((flags & ~static_cast<unsigned>(cudaEventRecordExternal)) != 0)
    return rt::fail(cudaErrorInvalidValue,
                    "invalid argument (kiln-sim: cudaEventRecordWithFlags: "
                    "flags " +
                        std::to_string(flags) + ")");
  const int device = rt::stream_device(stream);
  if (event->device != device)
    return invalid_handle("cudaEventRecord", "an event of device " + std::to_string(event->device) +
                                                 " recorded on a stream of device " +
                                                 std::to_string(device));
  bool handled = false;
  const cudaError_t captured =
      rt::capture_event_record(event, stream, (flags & cudaEventRecordExternal) != 0, &handled);
  if (handled) return captured;
  rt::forget_capture(event);
  if (!rt::is_lazy(stream) && rt::lazy_streams())
    rt::run_deferred_on_device(device, true);  // a record on the legacy stream waits for them
  rt::note_event(event, stream);
  event->recorded = true;
  event->time = std::chrono::steady_clock::now();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return cudaEventRecordWithFlags(event, stream, cudaEventRecordDefault);
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  kiln::sim::runtime::use_context();
  if (event == nullptr) return invalid_handle("cudaEventQuery", "a null event");
  if (const cudaError_t error = rt::check_event_wait("cudaEventQuery", event)) return error;
  rt::run_event(event);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  kiln::sim::runtime::use_context();
  if (event == nullptr) return invalid_handle("cudaEventSynchronize", "a null event");
  if (const cudaError_t error = rt::check_event_wait("cudaEventSynchronize", event)) return error;
  rt::run_event(event);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  kiln::sim::runtime::use_context();
  if (start == nullptr || end == nullptr)
    return invalid_handle("cudaEventElapsedTime", "a null event");
  for (cudaEvent_t event : {start, end})
    if (event->captured_by.load() != 0) return rt::check_event_wait("cudaEventElapsedTime", event);
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return invalid_handle("cudaEventElapsedTime", "an event made with cudaEventDisableTiming");
  if (!start->recorded || !end->recorded)
    return invalid_handle("cudaEventElapsedTime", "an event never recorded");
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}

}  // extern "C"
