// The simulated cudart: devices, memory and its checks, copies, streams and events.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kiln/sim/runtime/lazy_streams.h"
#include "kiln/sim/runtime/state.h"
#include "sim_test_support.h"

using Catch::Matchers::Contains;

TEST_CASE("two simulated devices by default, described as sm_90 with warp 32") {
  const char* asked = std::getenv("KILN_SIM_DEVICES");
  const int expected = asked && *asked ? std::atoi(asked) : 2;
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  CHECK(count == expected);
  cudaDeviceProp prop;
  REQUIRE(cudaGetDeviceProperties(&prop, count - 1) == cudaSuccess);
  CHECK(std::string(prop.name) == "kiln-sim");
  CHECK(prop.major == 9);
  CHECK(prop.warpSize == 32);
  CHECK(prop.maxThreadsPerBlock == 1024);
  int value = 0;
  REQUIRE(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  CHECK(value == kiln::sim::reported_sm_count());
  CHECK(cudaSetDevice(count) == cudaErrorInvalidDevice);
  CHECK_THAT(cudaGetErrorString(cudaGetLastError()), Contains("KILN_SIM_DEVICES"));
  int device = -1;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  CHECK(device == 0);
}

namespace {

// A planted bug: adds into `out` without zeroing it first, as if fresh device memory were zeros,
// which a GPU does not promise (the host's fresh pages, under the simulator, are).
__global__ void add_into_unzeroed(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] += in[i];
}

}  // namespace

TEST_CASE("fresh device memory holds 0xFF bytes, so a read before a write shows") {
  const DeviceBuffer<float> in(std::vector<float>(5, 1.0f));
  const DeviceBuffer<int32_t> fresh_ints(3);
  CHECK(fresh_ints.read() == std::vector<int32_t>(3, -1));
  {
    const DeviceBuffer<float> out(5);
    KILN_LAUNCH(1, 32, 0, nullptr, add_into_unzeroed)(in.get(), out.get(), 5);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    for (float v : out.read()) CHECK(std::isnan(v));  // the planted bug shows
  }
  kiln::sim::Schedule zeros = kiln::sim::schedule();
  zeros.poison_allocations = false;  // the simulator before 2026-11-28 (KILN_SIM_POISON=0)
  const ScheduleScope scope(zeros);
  const DeviceBuffer<float> out(5);
  KILN_LAUNCH(1, 32, 0, nullptr, add_into_unzeroed)(in.get(), out.get(), 5);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(out.read() == std::vector<float>(5, 1.0f));  // and passes unseen
}

TEST_CASE("the multiprocessor count the devices report is settable (an H200's 132)") {
  kiln::sim::Schedule h200 = kiln::sim::schedule();
  h200.sm_count = 132;
  const ScheduleScope scope(h200);
  int value = 0;
  REQUIRE(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  CHECK(value == 132);
  cudaDeviceProp prop;
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  CHECK(prop.multiProcessorCount == 132);
  kiln::sim::Schedule bad = h200;
  bad.sm_count = -1;
  CHECK_THROWS_AS(kiln::sim::set_schedule(bad), std::invalid_argument);
}

TEST_CASE("device memory: copies and sets inside one allocation, errors outside") {
  std::vector<int> host{1, 2, 3, 4, 5, 6, 7, 8};
  int* a = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&a), host.size() * sizeof(int)) == cudaSuccess);
  CHECK(reinterpret_cast<std::uintptr_t>(a) % 256 == 0);
  REQUIRE(cudaMemcpy(a, host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  REQUIRE(cudaMemsetAsync(a + 2, 0, 2 * sizeof(int), nullptr) == cudaSuccess);
  std::vector<int> back(8);
  REQUIRE(cudaMemcpyAsync(back.data(), a, 8 * sizeof(int), cudaMemcpyDefault, nullptr) ==
          cudaSuccess);
  CHECK(back == std::vector<int>{1, 2, 0, 0, 5, 6, 7, 8});

  // One element too many runs past the allocation.
  CHECK(cudaMemcpy(back.data(), a, 9 * sizeof(int), cudaMemcpyDeviceToHost) ==
        cudaErrorInvalidValue);
  CHECK_THAT(cudaGetErrorString(cudaGetLastError()), Contains("not inside one live allocation"));
  // A host pointer where the kind says device.
  CHECK(cudaMemcpy(back.data(), host.data(), 4, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(cudaMemset(host.data(), 0, 4) == cudaErrorInvalidValue);
  CHECK(cudaFree(host.data()) == cudaErrorInvalidValue);

  size_t free_before = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  CHECK(free_before < total);
  REQUIRE(cudaFree(a) == cudaSuccess);
  size_t free_after = 0;
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  CHECK(free_after == free_before + 8 * sizeof(int));
  // Freed memory is no longer an allocation.
  CHECK(cudaMemcpy(back.data(), a, 4, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST_CASE("copies between devices and 2-D sets") {
  if (!have_two_devices()) return;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  DeviceBuffer<char> on_1(std::vector<char>(64, 'x'));
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  DeviceBuffer<char> on_0(std::vector<char>(64, 'a'));
  REQUIRE(cudaMemset2DAsync(on_0.get(), 16, 'b', 4, 4, nullptr) == cudaSuccess);
  REQUIRE(cudaMemcpyPeerAsync(on_1.get(), 1, on_0.get(), 0, 64, nullptr) == cudaSuccess);
  std::vector<char> expected(64, 'a');
  for (int row = 0; row < 4; ++row) std::memset(expected.data() + row * 16, 'b', 4);
  CHECK(on_1.read() == expected);
  CHECK(cudaMemcpyPeerAsync(on_1.get(), 0, on_0.get(), 0, 64, nullptr) == cudaErrorInvalidValue);
  CHECK_THAT(cudaGetErrorString(cudaGetLastError()), Contains("expected device 0's"));
}

TEST_CASE("streams run in order, events time them on the host") {
  if (!have_two_devices()) return;
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t start = nullptr, end = nullptr, untimed = nullptr;
  REQUIRE(cudaEventCreate(&start) == cudaSuccess);
  REQUIRE(cudaEventCreate(&end) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming) == cudaSuccess);
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, end) == cudaErrorInvalidResourceHandle);
  REQUIRE(cudaEventRecord(start, stream) == cudaSuccess);
  REQUIRE(cudaEventRecord(end, stream) == cudaSuccess);
  REQUIRE(cudaEventRecord(untimed, stream) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(nullptr, end, 0) == cudaSuccess);
  CHECK(cudaStreamQuery(stream) == cudaSuccess);
  CHECK(cudaEventQuery(end) == cudaSuccess);
  REQUIRE(cudaEventElapsedTime(&ms, start, end) == cudaSuccess);
  CHECK(ms >= 0.0f);
  CHECK(cudaEventElapsedTime(&ms, start, untimed) == cudaErrorInvalidResourceHandle);
  // An event of device 0 recorded on a stream of device 1.
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t other = nullptr;
  REQUIRE(cudaStreamCreate(&other) == cudaSuccess);
  CHECK(cudaEventRecord(start, other) == cudaErrorInvalidResourceHandle);
  CHECK(cudaStreamDestroy(other) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaGetLastError();
  CHECK(cudaEventDestroy(start) == cudaSuccess);
  CHECK(cudaEventDestroy(end) == cudaSuccess);
  CHECK(cudaEventDestroy(untimed) == cudaSuccess);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

namespace {

__global__ void fill_kernel(float* out, float value, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = value;
}

__global__ void copy_kernel(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i];
}

// A planted bug: a side stream writes `data`, the legacy stream copies it out without waiting for
// the side stream (no event, no wait_stream). What the copy reads.
std::vector<float> read_without_waiting(unsigned flags) {
  const DeviceBuffer<float> data(std::vector<float>(4, 1.0f));
  const DeviceBuffer<float> copied(4);
  cudaStream_t side = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&side, flags) == cudaSuccess);
  KILN_LAUNCH(1, 32, 0, side, fill_kernel)(data.get(), 7.0f, 4);
  KILN_LAUNCH(1, 32, 0, nullptr, copy_kernel)(data.get(), copied.get(), 4);
  std::vector<float> out = copied.read();
  REQUIRE(cudaStreamDestroy(side) == cudaSuccess);
  return out;
}

}  // namespace

TEST_CASE("lazy streams: a read on another stream without a wait sees the old bytes") {
  namespace rt = kiln::sim::runtime;
  // With lazy streams (the default) the planted bug reads the old values every time.
  REQUIRE(rt::lazy_streams());
  CHECK(read_without_waiting(cudaStreamNonBlocking) == std::vector<float>(4, 1.0f));
  // A blocking stream (cudaStreamCreate's default) is waited for by the legacy stream's work, as
  // CUDA's legacy stream waits: the same code is then correct.
  CHECK(read_without_waiting(cudaStreamDefault) == std::vector<float>(4, 7.0f));
  {
    // KILN_SIM_LAZY_STREAMS=0, the simulator before 2026-11-29: the bug passes unseen.
    rt::set_lazy_streams(false);
    CHECK(read_without_waiting(cudaStreamNonBlocking) == std::vector<float>(4, 7.0f));
    rt::set_lazy_streams(true);
  }

  // Each wait CUDA defines runs the work it waits for, and no more.
  const DeviceBuffer<float> data(std::vector<float>(4, 1.0f));
  cudaStream_t side = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t first = nullptr;
  REQUIRE(cudaEventCreate(&first) == cudaSuccess);
  KILN_LAUNCH(1, 32, 0, side, fill_kernel)(data.get(), 2.0f, 4);
  REQUIRE(cudaEventRecord(first, side) == cudaSuccess);
  KILN_LAUNCH(1, 32, 0, side, fill_kernel)(data.get(), 3.0f, 4);
  CHECK(data.read() == std::vector<float>(4, 1.0f));
  REQUIRE(cudaEventSynchronize(first) == cudaSuccess);  // the first fill, not the second
  CHECK(data.read() == std::vector<float>(4, 2.0f));
  REQUIRE(cudaStreamSynchronize(side) == cudaSuccess);
  CHECK(data.read() == std::vector<float>(4, 3.0f));
  // cudaStreamWaitEvent: the legacy stream's later copy follows the recorded fill.
  KILN_LAUNCH(1, 32, 0, side, fill_kernel)(data.get(), 4.0f, 4);
  REQUIRE(cudaEventRecord(first, side) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(nullptr, first, 0) == cudaSuccess);
  CHECK(data.read() == std::vector<float>(4, 4.0f));
  // A query, cudaDeviceSynchronize, and a copy into pageable host memory on the stream itself.
  KILN_LAUNCH(1, 32, 0, side, fill_kernel)(data.get(), 5.0f, 4);
  CHECK(cudaStreamQuery(side) == cudaSuccess);
  CHECK(data.read() == std::vector<float>(4, 5.0f));
  KILN_LAUNCH(1, 32, 0, side, fill_kernel)(data.get(), 6.0f, 4);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(data.read() == std::vector<float>(4, 6.0f));
  KILN_LAUNCH(1, 32, 0, side, fill_kernel)(data.get(), 8.0f, 4);
  std::vector<float> host(4);
  REQUIRE(cudaMemcpyAsync(host.data(), data.get(), 4 * sizeof(float), cudaMemcpyDeviceToHost,
                          side) == cudaSuccess);
  CHECK(host == std::vector<float>(4, 8.0f));
  CHECK(cudaEventDestroy(first) == cudaSuccess);
  CHECK(cudaStreamDestroy(side) == cudaSuccess);
}

TEST_CASE("each host thread has its own current device and last error") {
  if (!have_two_devices()) return;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  REQUIRE(cudaSetDevice(7) == cudaErrorInvalidDevice);
  int seen_device = -1;
  cudaError_t seen_error = cudaErrorUnknown;
  std::thread other([&] {
    cudaGetDevice(&seen_device);
    seen_error = cudaPeekAtLastError();
  });
  other.join();
  CHECK(seen_device == 0);
  CHECK(seen_error == cudaSuccess);
  int device = -1;
  CHECK(cudaGetDevice(&device) == cudaSuccess);
  CHECK(device == 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

TEST_CASE("contexts: cudaSetDevice and device work make them, device 0's on a fresh thread") {
  // Each case runs in its own process (catch_discover_tests): no context yet.
  if (!have_two_devices()) return;
  namespace rt = kiln::sim::runtime;
  int count = 0, device = -1;
  cudaDeviceProp prop;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  REQUIRE(cudaGetDeviceProperties(&prop, 1) == cudaSuccess);
  CHECK_FALSE(rt::has_context(0));  // queries make none
  CHECK_FALSE(rt::has_context(1));
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  CHECK(rt::has_context(1));
  cudaEvent_t event = nullptr;
  REQUIRE(cudaEventCreate(&event) == cudaSuccess);
  CHECK_FALSE(rt::has_context(0));
  // A thread that never chose a device querying device 1's event: CUDA binds device 0's context.
  cudaError_t queried = cudaErrorUnknown;
  std::thread watchdog([&] { queried = cudaEventQuery(event); });
  watchdog.join();
  CHECK(queried == cudaSuccess);
  CHECK(rt::has_context(0));
  REQUIRE(cudaEventDestroy(event) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}
