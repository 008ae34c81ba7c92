// The simulated cudart's stream capture and CUDA graphs (sim/runtime/capture.h): what a capture
// records and what each launch of the graph runs, and the calls CUDA forbids during a capture,
// failing with CUDA's errors and invalidating it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "kiln/sim/grid.h"
#include "sim_test_support.h"

using Catch::Matchers::Contains;

namespace {

__global__ void add_kernel(int* x, int n, int value) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] += value;
}

void add(cudaStream_t stream, int* x, int n, int value) {
  KILN_LAUNCH(1, 64, 0, stream, add_kernel)(x, n, value);
}

cudaStream_t make_stream(unsigned flags = cudaStreamNonBlocking) {
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, flags) == cudaSuccess);
  return stream;
}

cudaStreamCaptureStatus status_of(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  REQUIRE(cudaStreamIsCapturing(stream, &status) == cudaSuccess);
  return status;
}

void host_count(void* counter) {
  ++*static_cast<int*>(counter);
}

// Ends a capture that a forbidden call invalidated: no graph, and CUDA's error.
void end_invalidated(cudaStream_t stream) {
  CHECK(status_of(stream) == cudaStreamCaptureStatusInvalidated);
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(1);
  CHECK(cudaStreamEndCapture(stream, &graph) == cudaErrorStreamCaptureInvalidated);
  CHECK(graph == nullptr);
  CHECK(status_of(stream) == cudaStreamCaptureStatusNone);
  cudaGetLastError();
}

}  // namespace

TEST_CASE(
    "graphs: a capture records launches, copies, sets and host functions; launches rerun them") {
  DeviceBuffer<int> x(std::vector<int>{1, 2, 3, 4});
  DeviceBuffer<int> y(std::vector<int>(4, 0));
  cudaStream_t stream = make_stream();
  int host_calls = 0;
  CHECK(status_of(stream) == cudaStreamCaptureStatusNone);
  const std::uint64_t grids_before = kiln::sim::grids_run();
  // Relaxed: the synchronous reads below, which check that nothing ran, are allowed.
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CHECK(status_of(stream) == cudaStreamCaptureStatusActive);
  unsigned long long id = 0;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  size_t dependencies = 7;
  REQUIRE(cudaStreamGetCaptureInfo(stream, &status, &id, nullptr, nullptr, nullptr,
                                   &dependencies) == cudaSuccess);
  CHECK(id > 0);
  CHECK(dependencies == 0);
  add(stream, x.get(), 4, 10);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(y.get(), x.get(), 4 * sizeof(int), cudaMemcpyDeviceToDevice, stream) ==
          cudaSuccess);
  REQUIRE(cudaMemsetAsync(x.get(), 0, sizeof(int), stream) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(stream, host_count, &host_calls) == cudaSuccess);
  REQUIRE(cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, nullptr, nullptr,
                                   &dependencies) == cudaSuccess);
  CHECK(dependencies == 1);
  // Nothing ran: the work is in the graph.
  CHECK(x.read() == std::vector<int>{1, 2, 3, 4});
  CHECK(y.read() == std::vector<int>{0, 0, 0, 0});
  CHECK(host_calls == 0);
  CHECK(kiln::sim::grids_run() == grids_before);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  CHECK(status_of(stream) == cudaStreamCaptureStatusNone);
  size_t nodes = 0;
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes == 4);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);  // the executable graph has its own nodes

  REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  // The stream is non-blocking: the legacy stream's copies below wait for it only when told.
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(y.read() == std::vector<int>{11, 12, 13, 14});
  CHECK(x.read() == std::vector<int>{0, 12, 13, 14});
  CHECK(host_calls == 1);
  CHECK(kiln::sim::grids_run() == grids_before + 1);
  // Each launch works on the memory as it is then: the static-buffer pattern.
  REQUIRE(cudaMemcpy(x.get(), std::vector<int>{5, 5, 5, 5}.data(), 4 * sizeof(int),
                     cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, nullptr) == cudaSuccess);
  CHECK(y.read() == std::vector<int>{15, 15, 15, 15});
  CHECK(host_calls == 2);
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  // A second capture of the same stream has an id of its own.
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
  unsigned long long second = 0;
  REQUIRE(cudaStreamGetCaptureInfo(stream, &status, &second) == cudaSuccess);
  CHECK(second != id);
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes == 0);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("graphs: a library stand-in call is recorded and runs at each launch, in stream order") {
  DeviceBuffer<int> x(std::vector<int>{1, 2});
  cudaStream_t stream = make_stream();
  int* p = x.get();
  const std::uint64_t calls_before = kiln::sim::library_calls();
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  add(stream, p, 2, 1);
  kiln::sim::library_call("test library", stream, [p] { p[1] = p[0] * 100; });
  CHECK(kiln::sim::library_calls() == calls_before);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(x.read() == std::vector<int>{2, 200});
  REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(x.read() == std::vector<int>{3, 300});
  CHECK(kiln::sim::library_calls() == calls_before + 2);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_CASE("graphs: a fork joins the capture through an event and must be joined back") {
  DeviceBuffer<int> x(std::vector<int>{0, 0});
  cudaStream_t origin = make_stream(), side = make_stream();
  cudaEvent_t fork = nullptr, join = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);

  REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  add(origin, x.get(), 1, 1);
  REQUIRE(cudaEventRecord(fork, origin) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
  CHECK(status_of(side) == cudaStreamCaptureStatusActive);  // it joined the capture
  add(side, x.get() + 1, 1, 5);
  REQUIRE(cudaEventRecord(join, side) == cudaSuccess);
  // A captured event cannot be queried from the host: CUDA's error, and the capture invalidated.
  CHECK(cudaEventQuery(join) == cudaErrorCapturedEvent);
  CHECK(status_of(origin) == cudaStreamCaptureStatusInvalidated);
  end_invalidated(origin);
  CHECK(status_of(side) == cudaStreamCaptureStatusNone);
  CHECK(cudaEventSynchronize(join) == cudaErrorCapturedEvent);  // still the capture's
  cudaGetLastError();

  // The same, joined back and not queried: one graph of two kernels.
  REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  add(origin, x.get(), 1, 1);
  REQUIRE(cudaEventRecord(fork, origin) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
  add(side, x.get() + 1, 1, 5);
  REQUIRE(cudaEventRecord(join, side) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(origin, join, 0) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(origin, &graph) == cudaSuccess);
  CHECK(status_of(side) == cudaStreamCaptureStatusNone);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, origin) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(origin) == cudaSuccess);
  CHECK(x.read() == std::vector<int>{1, 5});
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  // Re-recorded outside a capture, the event is an ordinary one again.
  REQUIRE(cudaEventRecord(join, side) == cudaSuccess);
  CHECK(cudaEventQuery(join) == cudaSuccess);

  // Not joined back: the side stream's kernel would be left out of the origin's graph.
  REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  REQUIRE(cudaEventRecord(fork, origin) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
  add(side, x.get(), 1, 1);
  graph = reinterpret_cast<cudaGraph_t>(1);
  CHECK(cudaStreamEndCapture(origin, &graph) == cudaErrorStreamCaptureUnjoined);
  CHECK(graph == nullptr);
  CHECK_THAT(cudaGetErrorString(cudaGetLastError()), Contains("kernel add_kernel"));
  CHECK(status_of(side) == cudaStreamCaptureStatusNone);
  CHECK(x.read() == std::vector<int>{1, 5});  // nothing captured ever ran

  // Waiting in a capture for an event recorded outside it, without cudaEventWaitExternal.
  REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(origin, join, 0) == cudaErrorStreamCaptureIsolation);
  end_invalidated(origin);
  REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(origin, join, cudaEventWaitExternal) == cudaSuccess);
  REQUIRE(cudaStreamEndCapture(origin, &graph) == cudaSuccess);
  cudaGraphDestroy(graph);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  cudaStreamDestroy(origin);
  cudaStreamDestroy(side);
}

TEST_CASE("graphs: synchronising or querying a capturing stream invalidates the capture") {
  DeviceBuffer<int> x(std::vector<int>{0});
  cudaStream_t stream = make_stream();
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  add(stream, x.get(), 1, 1);
  CHECK(cudaStreamSynchronize(stream) == cudaErrorStreamCaptureUnsupported);
  CHECK_THAT(cudaGetErrorString(cudaGetLastError()), Contains("cudaStreamSynchronize"));
  // The capture refuses further work, as CUDA's does, until it is ended.
  add(stream, x.get(), 1, 1);
  CHECK(cudaGetLastError() == cudaErrorStreamCaptureInvalidated);
  CHECK(cudaMemsetAsync(x.get(), 0, 4, stream) == cudaErrorStreamCaptureInvalidated);
  end_invalidated(stream);
  // The stream works again, and nothing captured ran.
  add(stream, x.get(), 1, 2);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(x.read() == std::vector<int>{2});

  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CHECK(cudaStreamQuery(stream) == cudaErrorStreamCaptureUnsupported);
  end_invalidated(stream);
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported);
  end_invalidated(stream);
  cudaStreamDestroy(stream);
}

TEST_CASE("graphs: potentially unsafe calls follow the thread's interaction mode") {
  cudaStream_t stream = make_stream();
  void* p = nullptr;
  std::vector<int> host(4, 1);
  DeviceBuffer<int> x(host);

  // Thread-local capture: this thread may not cudaMalloc, cudaMemcpy or query an event...
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(cudaMalloc(&p, 256) == cudaErrorStreamCaptureUnsupported);
  CHECK_THAT(cudaGetErrorString(cudaGetLastError()), Contains("cudaMalloc is potentially unsafe"));
  end_invalidated(stream);
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(cudaMemcpy(host.data(), x.get(), 16, cudaMemcpyDeviceToHost) ==
        cudaErrorStreamCaptureUnsupported);
  end_invalidated(stream);
  // ...unless it switches itself to relaxed, as PyTorch's allocator does around cudaMalloc...
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeGlobal);
  CHECK(cudaMalloc(&p, 256) == cudaSuccess);
  REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeRelaxed);
  CHECK(status_of(stream) == cudaStreamCaptureStatusActive);
  // ...and another thread may, with its own (global) mode.
  cudaError_t other = cudaErrorUnknown;
  std::thread([&] { other = cudaFree(p); }).join();
  CHECK(other == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  cudaGraphDestroy(graph);

  // A global capture forbids them to every thread in global mode, and ends only on its own thread.
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
  cudaError_t ended = cudaErrorUnknown;
  std::thread([&] {
    other = cudaMalloc(&p, 256);
    cudaGraph_t g = nullptr;
    ended = cudaStreamEndCapture(stream, &g);
  }).join();
  CHECK(other == cudaErrorStreamCaptureUnsupported);
  CHECK(ended == cudaErrorStreamCaptureWrongThread);
  end_invalidated(stream);
  cudaStreamDestroy(stream);
}

TEST_CASE("graphs: the legacy stream while a blocking stream captures, and bad captures") {
  DeviceBuffer<int> x(std::vector<int>{0});
  cudaStream_t blocking = make_stream(cudaStreamDefault);
  REQUIRE(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  CHECK(cudaStreamIsCapturing(nullptr, &status) == cudaErrorStreamCaptureImplicit);
  CHECK(status_of(blocking) == cudaStreamCaptureStatusActive);  // a question does not invalidate
  add(nullptr, x.get(), 1, 1);
  CHECK(cudaGetLastError() == cudaErrorStreamCaptureImplicit);
  end_invalidated(blocking);
  CHECK(x.read() == std::vector<int>{0});
  // A non-blocking stream's capture leaves the legacy stream alone.
  cudaStream_t free_running = make_stream();
  REQUIRE(cudaStreamBeginCapture(free_running, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  add(nullptr, x.get(), 1, 1);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(x.read() == std::vector<int>{1});
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(free_running, &graph) == cudaSuccess);
  cudaGraphDestroy(graph);

  CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) == cudaErrorInvalidValue);
  CHECK(cudaStreamEndCapture(blocking, &graph) == cudaErrorIllegalState);
  REQUIRE(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CHECK(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed) == cudaErrorIllegalState);
  REQUIRE(cudaStreamEndCapture(blocking, &graph) == cudaSuccess);
  cudaGraphDestroy(graph);
  cudaGetLastError();
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(free_running);
}
