// What CUDA calls undefined or a fault, which a GPU may hide: each is an error here that names the
// kernel, the block and the threads.
#include <string>
#include <vector>

#include "sim_test_support.h"

using Catch::Matchers::Contains;

namespace {

// Threads 16 and up skip the barrier that threads below 16 wait at.
__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 1;
}

// Odd and even threads wait at different barriers.
__global__ void two_barriers_kernel(int* out) {
  if (threadIdx.x % 2)
    __syncthreads();
  else
    __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void uniform_barrier_kernel(int* out) {
  __syncthreads();
  out[threadIdx.x] = 2;
}

// Lane 31 never reaches the shuffle its mask names.
__global__ void partial_warp_shuffle_kernel(int* out) {
  int v = static_cast<int>(threadIdx.x);
  if (threadIdx.x % 32 != 31) v = __shfl_xor_sync(~0u, v, 1);
  out[threadIdx.x] = v;
}

// Thread 0 waits at the block barrier while its warp waits at a shuffle: a deadlock.
__global__ void deadlock_kernel(int* out) {
  int v = 1;
  if (threadIdx.x == 0)
    __syncthreads();
  else
    v = __shfl_sync(~0u, v, 0);
  out[threadIdx.x] = v;
}

__global__ void mask_without_self_kernel(int* out) {
  out[threadIdx.x] = __shfl_sync(0x1u, 5, 0);
}

}  // namespace

TEST_CASE("a barrier some threads exit without reaching is an error naming block and threads") {
  for (const kiln::sim::Schedule& schedule : all_schedules()) {
    ScheduleScope scope(schedule);
    DeviceBuffer<int> out(64);
    INFO("seed " << schedule.seed << ", fibers " << schedule.fibers);
    CHECK_THROWS_WITH(KILN_LAUNCH(dim3(3, 2), 64, 0, nullptr, divergent_barrier_kernel)(out.get()),
                      Contains("kernel divergent_barrier_kernel, block (") &&
                          Contains("waits at __syncthreads (") && Contains("test_sim_errors.cu:") &&
                          Contains("exited without reaching it") && Contains("thread ("));
  }
  ScheduleScope scope({0, 1, false});
  DeviceBuffer<int> out(64);
  CHECK_THROWS_WITH(KILN_LAUNCH(1, 64, 0, nullptr, two_barriers_kernel)(out.get()),
                    Contains("block (0,0,0)") && Contains("at another one"));
  // The failed block's threads were unwound: the next launch runs on the same workers.
  KILN_LAUNCH(1, 64, 0, nullptr, uniform_barrier_kernel)(out.get());
  CHECK(out.read() == std::vector<int>(64, 2));
}

TEST_CASE("a shuffle some lanes of its mask never reach is an error naming the lane") {
  for (const kiln::sim::Schedule& schedule : all_schedules()) {
    ScheduleScope scope(schedule);
    DeviceBuffer<int> out(64);
    INFO("seed " << schedule.seed << ", fibers " << schedule.fibers);
    CHECK_THROWS_WITH(KILN_LAUNCH(1, 64, 0, nullptr, partial_warp_shuffle_kernel)(out.get()),
                      Contains("kernel partial_warp_shuffle_kernel, block (0,0,0)") &&
                          Contains("waits at __shfl_xor_sync (") &&
                          Contains("for lane 31, thread (") &&
                          Contains("exited without reaching it"));
    CHECK_THROWS_WITH(KILN_LAUNCH(1, 32, 0, nullptr, deadlock_kernel)(out.get()),
                      Contains("waits at __shfl_sync (") && Contains("thread (0,0,0)") &&
                          Contains("which waits at __syncthreads (") && Contains("a deadlock"));
  }
  ScheduleScope scope({0, 1, false});
  DeviceBuffer<int> out(32);
  CHECK_THROWS_WITH(KILN_LAUNCH(1, 32, 0, nullptr, mask_without_self_kernel)(out.get()),
                    Contains("thread (1,0,0) at __shfl_sync") &&
                        Contains("the mask 0x00000001 leaves out the calling lane 1"));
}

namespace {

__global__ void write_kernel(float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = 1.0f;
}

__global__ void child_kernel(float* out) {
  out[threadIdx.x] = 2.0f;
}
__global__ void parent_kernel(float* out) {
  if (threadIdx.x == 0) KILN_LAUNCH(1, 32, 0, nullptr, child_kernel)(out);
}

struct Big {
  char bytes[5000];
};
__global__ void big_argument_kernel(Big big, char* out) {
  out[threadIdx.x] = big.bytes[threadIdx.x];
}

}  // namespace

TEST_CASE("a host pointer argument is an error, pinned host memory is not") {
  ScheduleScope scope({0, 1, false});
  std::vector<float> host(64);
  CHECK_THROWS_WITH(
      KILN_LAUNCH(1, 64, 0, nullptr, write_kernel)(host.data(), 64),
      Contains("kernel write_kernel, argument 0") && Contains("is host memory, not device memory"));
  CHECK(host == std::vector<float>(64, 0.0f));
  float* pinned = nullptr;
  REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&pinned), 64 * sizeof(float),
                        cudaHostAllocPortable) == cudaSuccess);
  KILN_LAUNCH(1, 64, 0, nullptr, write_kernel)(pinned, 64);
  CHECK(std::vector<float>(pinned, pinned + 64) == std::vector<float>(64, 1.0f));
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
}

TEST_CASE("a kernel given another device's memory is an error") {
  if (!have_two_devices()) return;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  float* on_device_1 = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&on_device_1), 64 * sizeof(float)) == cudaSuccess);
  cudaStream_t stream_of_device_1 = nullptr;
  REQUIRE(cudaStreamCreate(&stream_of_device_1) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  CHECK_THROWS_WITH(
      KILN_LAUNCH(1, 64, 0, nullptr, write_kernel)(on_device_1, 64),
      Contains("argument 0") && Contains("is device 1's memory") && Contains("runs on device 0"));
  // A stream of device 1 while device 0 is current: CUDA's launch error, nothing runs.
  DeviceBuffer<float> on_device_0(64);
  KILN_LAUNCH(1, 64, 0, stream_of_device_1, write_kernel)(on_device_0.get(), 64);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  KILN_LAUNCH(1, 64, 0, stream_of_device_1, write_kernel)(on_device_1, 64);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaStreamDestroy(stream_of_device_1) == cudaSuccess);
  CHECK(cudaFree(on_device_1) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

TEST_CASE("a launch over CUDA's limits sets cudaGetLastError and runs nothing") {
  DeviceBuffer<float> out(std::vector<float>(2048, 0.0f));
  REQUIRE(cudaGetLastError() == cudaSuccess);
  KILN_LAUNCH(1, 2048, 0, nullptr, write_kernel)(out.get(), 2048);
  const cudaError_t too_many_threads = cudaGetLastError();
  CHECK(too_many_threads == cudaErrorInvalidConfiguration);
  CHECK_THAT(cudaGetErrorString(too_many_threads),
             Contains("kernel write_kernel") && Contains("2048 threads"));
  CHECK(cudaGetLastError() == cudaSuccess);  // reading it cleared it
  KILN_LAUNCH(1, dim3(32, 1, 65), 0, nullptr, write_kernel)(out.get(), 2048);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  KILN_LAUNCH(dim3(1, 65536), 32, 0, nullptr, write_kernel)(out.get(), 2048);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  KILN_LAUNCH(0, 32, 0, nullptr, write_kernel)(out.get(), 2048);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  CHECK(out.read() == std::vector<float>(2048, 0.0f));

  DeviceBuffer<char> bytes(64);
  KILN_LAUNCH(1, 32, 0, nullptr, big_argument_kernel)(Big{}, bytes.get());
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);

  // Dynamic shared memory: 48 KiB unless raised, 227 KiB at most.
  KILN_LAUNCH(1, 32, 64 * 1024, nullptr, write_kernel)(out.get(), 32);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(out.read()[0] == 0.0f);
  REQUIRE(cudaFuncSetAttribute(reinterpret_cast<const void*>(&write_kernel),
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               64 * 1024) == cudaSuccess);
  KILN_LAUNCH(1, 32, 64 * 1024, nullptr, write_kernel)(out.get(), 32);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(out.read()[0] == 1.0f);
  CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&write_kernel),
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             300 * 1024) == cudaErrorInvalidValue);
}

TEST_CASE("a launch from inside a kernel is an error, not a hang") {
  DeviceBuffer<float> out(32);
  CHECK_THROWS_WITH(KILN_LAUNCH(2, 32, 0, nullptr, parent_kernel)(out.get()),
                    Contains("kernel child_kernel launched from inside a kernel"));
}
