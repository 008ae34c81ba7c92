// Streams and events. Work runs in order and at once, so every stream is always idle: queries
// answer cudaSuccess, waits return at once, and an event holds the host time it was recorded at.
// A stream or event belongs to the device current when it was made; recording an event on another
// device's stream is CUDA's invalid-handle error.
#include <cuda_runtime_api.h>

#include <chrono>
#include <ratio>
#include <string>

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
  delete stream;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t) {
  kiln::sim::runtime::use_context();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t) {
  kiln::sim::runtime::use_context();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned int) {
  kiln::sim::runtime::use_context();
  if (event == nullptr) return invalid_handle("cudaStreamWaitEvent", "a null event");
  return cudaSuccess;
}

// The host function runs now, on the calling thread: the work queued before it has finished.
cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void* user_data) {
  kiln::sim::runtime::use_context();
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

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  kiln::sim::runtime::use_context();
  if (event == nullptr) return invalid_handle("cudaEventRecord", "a null event");
  const int device = rt::stream_device(stream);
  if (event->device != device)
    return invalid_handle("cudaEventRecord", "an event of device " + std::to_string(event->device) +
                                                 " recorded on a stream of device " +
                                                 std::to_string(device));
  event->recorded = true;
  event->time = std::chrono::steady_clock::now();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  kiln::sim::runtime::use_context();
  if (event == nullptr) return invalid_handle("cudaEventQuery", "a null event");
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  kiln::sim::runtime::use_context();
  if (event == nullptr) return invalid_handle("cudaEventSynchronize", "a null event");
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  kiln::sim::runtime::use_context();
  if (start == nullptr || end == nullptr)
    return invalid_handle("cudaEventElapsedTime", "a null event");
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return invalid_handle("cudaEventElapsedTime", "an event made with cudaEventDisableTiming");
  if (!start->recorded || !end->recorded)
    return invalid_handle("cudaEventElapsedTime", "an event never recorded");
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}

}  // extern "C"
