// Stream capture and CUDA graphs in the simulator, as CUDA 13 defines them (docs/simulator.md,
// "CUDA graphs"). A stream in capture mode does not run the work queued on it: each launch, async
// copy or set, host function and library stand-in becomes a node of the capture's graph, with the
// dependencies stream order and events give it, and a launch of the instantiated graph runs the
// nodes in the order they were recorded (a topological order: a node is recorded after every node
// it depends on). Calls CUDA forbids during a capture fail with CUDA's errors and invalidate the
// capture, as CUDA does; the entry points of sim/runtime/*.cpp ask here what to do.
#pragma once

#include <driver_types.h>

#include <functional>
#include <string>

namespace kiln::sim::runtime {

// One node of a graph: what the captured call would have done, run at every launch of the graph on
// the device it was captured on.
struct GraphNode {
  std::string what;  // "kernel add_kernel", "cudaMemcpyAsync of 64 bytes", ...: for errors
  int device = 0;
  std::function<void()> run;
};

// What a call that queues work on a stream does with it: run it now, record it into the capture
// the stream is part of or into a lazy stream's queue (sim/runtime/lazy_streams.h), or nothing: the
// call fails with `error` (recorded as the thread's last error, with the reason), which invalidated
// the capture where CUDA invalidates it.
struct Queue {
  enum Action { run, record, fail } action = run;
  cudaError_t error = cudaSuccess;
};
// `function` names the call for the error ("cudaMemcpyAsync"); `stream` may be a legacy handle.
Queue queue_on(const char* function, cudaStream_t stream);
// Appends a node to the capture `stream` is part of, or to its lazy queue when it captures
// nothing; call only after queue_on said `record`.
void record(cudaStream_t stream, GraphNode node);

// The calls CUDA calls "potentially unsafe" during a capture (they are not queued on the captured
// stream, or wait for the device: cudaMalloc, cudaFree, cudaHostAlloc, synchronous copies and sets,
// stream and event queries and synchronisations, ...). cudaSuccess, or, when this thread may not
// make them now (cudaThreadExchangeStreamCaptureMode), cudaErrorStreamCaptureUnsupported with the
// capture that forbids it invalidated.
cudaError_t check_unsafe_call(const char* function);

// A synchronous call on the legacy stream of the current device (cudaMemcpy, cudaMemset): CUDA's
// cudaErrorStreamCaptureImplicit, invalidating them, while a blocking stream of that device
// captures; then the unsafe-call check.
cudaError_t check_synchronous_call(const char* function);

// A wait for a whole device (cudaDeviceSynchronize): cudaErrorStreamCaptureUnsupported while a
// stream of `device` captures (those captures are invalidated); then the unsafe-call check.
cudaError_t check_device_wait(const char* function, int device);

// A wait for or a query of one stream (cudaStreamSynchronize, cudaStreamQuery): an error while the
// stream captures (invalidating it), or is the legacy stream while a blocking stream captures;
// then the unsafe-call check.
cudaError_t check_stream_wait(const char* function, cudaStream_t stream);

// An event query, synchronisation or timing: cudaErrorCapturedEvent for an event last recorded in
// a capture, whatever the mode; then the unsafe-call check.
cudaError_t check_event_wait(const char* function, cudaEvent_t event);

// cudaEventRecord and cudaStreamWaitEvent on a capturing stream: the event carries the stream's
// dependencies into the capture, and a stream that waits for a captured event joins its capture.
// cudaSuccess when done here, or the error; `handled` false: no capture is involved, the caller
// does the ordinary thing.
cudaError_t capture_event_record(cudaEvent_t event, cudaStream_t stream, bool external,
                                 bool* handled);
cudaError_t capture_stream_wait(cudaStream_t stream, cudaEvent_t event, unsigned flags,
                                bool* handled);
// A plain record of the event outside any capture: it is no longer a captured event.
void forget_capture(cudaEvent_t event);

}  // namespace kiln::sim::runtime
