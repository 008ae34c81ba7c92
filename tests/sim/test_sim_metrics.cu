// The simulator's counting (sim/metrics/counts.h) on planted kernels whose counts are known: a
// coalesced copy, a strided load, a float4 copy, a shared tile read by columns (padded and not),
// a branch on threadIdx.x % 2; the same counts under every schedule; nothing counted when off.
// This file is compiled for counting (tests/sim/CMakeLists.txt), as the kernel lab is.
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/sim/metrics/counts.h"
#include "sim_test_support.h"

namespace {

constexpr int kN = 4096;  // floats
constexpr int kThreads = 256;

__global__ void copy_kernel(const float* in, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i];
}

__global__ void stride32_kernel(const float* in, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i * 32];
}

__global__ void copy4_kernel(const float4* in, float4* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i];
}

// A 32 x 32 block stores its tile by rows (lane = column) and reads it back by columns (lane =
// row): with rows of 32 floats a column lies in one bank.
template <int kPitch>
__global__ void transpose_kernel(const float* in, float* out) {
  __shared__ float tile[32][kPitch];
  const int x = threadIdx.x, y = threadIdx.y;
  tile[y][x] = in[y * 32 + x];
  __syncthreads();
  out[y * 32 + x] = tile[x][y];
}

__global__ void branch_kernel(float* even, float* odd) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x % 2 == 0)
    even[i] = 1.0f;
  else
    odd[i] = 2.0f;
}

// A tree in shared memory: conflicts (stride 2 words), divergence (tid < stride) and barriers.
__global__ void tree_kernel(const float* in, float* out) {
  __shared__ float s[2 * kThreads];
  const int t = threadIdx.x;
  s[2 * t] = in[blockIdx.x * 2 * kThreads + 2 * t];
  s[2 * t + 1] = in[blockIdx.x * 2 * kThreads + 2 * t + 1];
  __syncthreads();
  for (int stride = 1; stride <= kThreads; stride *= 2) {
    if (t % stride == 0 && 2 * t + stride < 2 * kThreads) s[2 * t] += s[2 * t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// The counts of one kernel's launches, taken with counting on.
template <class Launch>
kiln::sim::KernelCounts counted(Launch launch) {
  kiln::sim::take_counts();
  kiln::sim::set_counting(true);
  launch();
  kiln::sim::set_counting(false);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::vector<kiln::sim::KernelCounts> counts = kiln::sim::take_counts();
  REQUIRE(counts.size() == 1);
  return counts[0];
}

}  // namespace

TEST_CASE("this file is compiled for counting") {
  CHECK(kiln::sim::counted_files() > 0);
}

TEST_CASE("a coalesced float copy: 4 sectors a 128-byte request") {
  DeviceBuffer<float> in(std::vector<float>(kN, 1.0f)), out(kN);
  const auto c = counted([&] {
    KILN_LAUNCH(kN / kThreads, kThreads, 0, nullptr, copy_kernel)(in.get(), out.get());
  });
  CHECK(c.launches == 1);
  CHECK(c.load_requests == kN / 32);
  CHECK(c.load_sectors == 4 * c.load_requests);
  CHECK(c.load_bytes == 128 * c.load_requests);
  CHECK(c.store_requests == kN / 32);
  CHECK(c.store_sectors == 4 * c.store_requests);
  CHECK(c.unique_read_bytes == kN * 4);
  CHECK(c.unique_write_bytes == kN * 4);
  CHECK(c.active_lanes == c.lane_slots);
  CHECK(c.shared_load_requests + c.shared_store_requests == 0);
}

TEST_CASE("a stride-32 float load: 32 sectors a request, 4 of 32 bytes used in each") {
  DeviceBuffer<float> in(std::vector<float>(kN * 32, 1.0f)), out(kN);
  const auto c = counted([&] {
    KILN_LAUNCH(kN / kThreads, kThreads, 0, nullptr, stride32_kernel)(in.get(), out.get());
  });
  CHECK(c.load_requests == kN / 32);
  CHECK(c.load_sectors == 32 * c.load_requests);
  CHECK(c.load_bytes == 128 * c.load_requests);
  CHECK(c.store_sectors == 4 * c.store_requests);
  CHECK(c.unique_read_bytes == kN * 32);  // one sector a lane
}

TEST_CASE("a float4 copy: 16 sectors a 512-byte request") {
  DeviceBuffer<float4> in(std::vector<float4>(kN / 4, float4{1, 2, 3, 4})), out(kN / 4);
  const auto c = counted([&] {
    KILN_LAUNCH(kN / 4 / kThreads, kThreads, 0, nullptr, copy4_kernel)(in.get(), out.get());
  });
  CHECK(c.load_requests == kN / 4 / 32);
  CHECK(c.load_sectors == 16 * c.load_requests);
  CHECK(c.load_bytes == 512 * c.load_requests);
  CHECK(c.store_sectors == 16 * c.store_requests);
}

TEST_CASE("a column of a 32 x 32 float tile: 32-way bank conflicts, 1-way padded to 33") {
  DeviceBuffer<float> in(std::vector<float>(32 * 32, 1.0f)), out(32 * 32);
  const auto plain = counted([&] {
    KILN_LAUNCH(1, dim3(32, 32), 0, nullptr, transpose_kernel<32>)(in.get(), out.get());
  });
  CHECK(plain.shared_store_requests == 32);
  CHECK(plain.shared_store_wavefronts == 32);  // rows: conflict-free
  CHECK(plain.shared_load_requests == 32);
  CHECK(plain.shared_load_ideal == 32);
  CHECK(plain.shared_load_wavefronts == 32 * 32);
  const auto padded = counted([&] {
    KILN_LAUNCH(1, dim3(32, 32), 0, nullptr, transpose_kernel<33>)(in.get(), out.get());
  });
  CHECK(padded.shared_load_requests == 32);
  CHECK(padded.shared_load_wavefronts == 32);
  CHECK(padded.shared_store_wavefronts == 32);
  CHECK(out.read() == in.read());
}

TEST_CASE("a branch on threadIdx.x % 2: half the lanes at each side's store") {
  DeviceBuffer<float> even(kN), odd(kN);
  const auto c = counted([&] {
    KILN_LAUNCH(kN / kThreads, kThreads, 0, nullptr, branch_kernel)(even.get(), odd.get());
  });
  CHECK(c.store_requests == 2 * kN / 32);
  CHECK(c.active_lanes * 2 == c.lane_slots);
  CHECK(c.store_sectors == 4 * c.store_requests);  // each side's 16 lanes span 128 bytes
  CHECK(c.store_bytes == 64 * c.store_requests);
}

TEST_CASE("counts are the same under every schedule") {
  const int blocks = 8;
  std::vector<float> host(blocks * 2 * kThreads);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 5);
  DeviceBuffer<float> in(host), out(blocks);
  std::vector<kiln::sim::KernelCounts> seen;
  for (const kiln::sim::Schedule& schedule : all_schedules()) {
    ScheduleScope scope(schedule);
    seen.push_back(counted([&] {
      KILN_LAUNCH(blocks, kThreads, 0, nullptr, tree_kernel)(in.get(), out.get());
    }));
  }
  const kiln::sim::KernelCounts& first = seen.front();
  CHECK(first.shared_load_wavefronts > first.shared_load_ideal);  // stride-2 pairs conflict
  CHECK(first.active_lanes < first.lane_slots);                   // t % stride diverges
  for (const kiln::sim::KernelCounts& c : seen) CHECK(c == first);
}

TEST_CASE("nothing is counted when counting is off") {
  DeviceBuffer<float> in(std::vector<float>(kN, 1.0f)), out(kN);
  kiln::sim::set_counting(false);
  kiln::sim::take_counts();
  KILN_LAUNCH(kN / kThreads, kThreads, 0, nullptr, copy_kernel)(in.get(), out.get());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(kiln::sim::take_counts().empty());
}
