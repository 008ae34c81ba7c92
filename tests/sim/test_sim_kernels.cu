// Kernels that CUDA defines, run on the simulator: kiln's own block_reduce.cuh unmodified, warp
// collectives lane by lane, barriers, atomics, shared memory, and the fiberless fast path.
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kiln/kernels/cuda/block_reduce.cuh"
#include "sim_test_support.h"

namespace {

using kiln::cuda::row_allreduce;
using kiln::cuda::RowReduceSmem;
using kiln::cuda::Sum;

// One row of `cols` per threadIdx.y, blockDim.y rows a block: every thread of a row sums a
// strided share, row_allreduce combines them, and every thread checks it got lane 0's bits.
__global__ void row_sum_kernel(const float* x, float* out, int* disagreements, int64_t rows,
                               int64_t cols) {
  __shared__ RowReduceSmem<float> smem;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  float v = 0;
  if (row < rows)
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) v += x[row * cols + c];
  const float total = row_allreduce(v, Sum{}, 0.0f, smem);
  if (row >= rows) return;
  if (threadIdx.x == 0) out[row] = total;
  __syncwarp();
  if (total != out[row]) atomicAdd(disagreements, 1);
}

std::vector<float> small_integers(std::size_t n) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int>(i * 7 % 13) - 6);
  return x;
}

}  // namespace

TEST_CASE("row_allreduce of block_reduce.cuh sums rows exactly under every schedule") {
  // Small integers: every partial sum is exact in float, so the answer is known whatever the tree.
  const int64_t rows = 37, cols = 300;
  const std::vector<float> host = small_integers(static_cast<std::size_t>(rows * cols));
  std::vector<float> expected(rows);
  for (int64_t r = 0; r < rows; ++r)
    expected[r] = std::accumulate(host.begin() + r * cols, host.begin() + (r + 1) * cols, 0.0f);
  DeviceBuffer<float> x(host);
  for (const dim3 block : {dim3(32, 4), dim3(64, 2), dim3(256, 1)}) {
    for (const kiln::sim::Schedule& schedule : all_schedules()) {
      ScheduleScope scope(schedule);
      DeviceBuffer<float> out(rows);
      DeviceBuffer<int> disagreements(std::vector<int>{0});
      const unsigned blocks = static_cast<unsigned>((rows + block.y - 1) / block.y);
      KILN_LAUNCH(blocks, block, 0, nullptr, row_sum_kernel)
      (x.get(), out.get(), disagreements.get(), rows, cols);
      REQUIRE(cudaGetLastError() == cudaSuccess);
      INFO("block " << block.x << "x" << block.y << ", seed " << schedule.seed << ", workers "
                    << schedule.workers << ", fibers " << schedule.fibers);
      CHECK(out.read() == expected);
      CHECK(disagreements.read()[0] == 0);
    }
  }
}

namespace {

// Each lane records the results of every collective, for a check on the host.
__global__ void warp_ops_kernel(unsigned* out) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned v = 100 + lane;
  unsigned* mine = out + threadIdx.x * 9;
  mine[0] = __shfl_sync(~0u, v, 5);
  mine[1] = __shfl_xor_sync(~0u, v, 3);
  mine[2] = __shfl_up_sync(~0u, v, 2);
  mine[3] = __shfl_down_sync(~0u, v, 4);
  mine[4] = __shfl_xor_sync(~0u, v, 8, 16);
  mine[5] = __ballot_sync(~0u, lane % 3 == 0);
  mine[6] = static_cast<unsigned>(__any_sync(~0u, lane == 7));
  mine[7] = static_cast<unsigned>(__all_sync(~0u, lane < 31));
  // Half warps on their own: lanes 0-15 and 16-31 shuffle within their half.
  const unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  mine[8] = __shfl_down_sync(half, v, 1, 16);
}

}  // namespace

TEST_CASE("warp collectives give each lane CUDA's result") {
  for (const kiln::sim::Schedule& schedule : all_schedules()) {
    ScheduleScope scope(schedule);
    DeviceBuffer<unsigned> out(64 * 9);
    KILN_LAUNCH(1, 64, 0, nullptr, warp_ops_kernel)(out.get());
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const std::vector<unsigned> got = out.read();
    unsigned ballot = 0;
    for (unsigned lane = 0; lane < 32; lane += 3) ballot |= 1u << lane;
    for (unsigned t = 0; t < 64; ++t) {
      const unsigned lane = t % 32;
      INFO("thread " << t << ", seed " << schedule.seed << ", fibers " << schedule.fibers);
      const unsigned* r = got.data() + t * 9;
      CHECK(r[0] == 105);
      CHECK(r[1] == 100 + (lane ^ 3));
      CHECK(r[2] == 100 + (lane >= 2 ? lane - 2 : lane));
      CHECK(r[3] == 100 + (lane + 4 < 32 ? lane + 4 : lane));
      CHECK(r[4] == 100 + (lane ^ 8));
      CHECK(r[5] == ballot);
      CHECK(r[6] == 1);
      CHECK(r[7] == 0);
      CHECK(r[8] == 100 + (lane % 16 + 1 < 16 ? lane + 1 : lane));
    }
  }
}

namespace {

// Thread i writes its slot and reads thread i-1's: correct only once the block has passed a barrier
// between the write and the read.
template <bool kBarrier>
__global__ void neighbour_kernel(int* out) {
  __shared__ int slots[128];
  const unsigned i = threadIdx.x;
  slots[i] = static_cast<int>(blockIdx.x * 1000 + i);
  if (kBarrier) __syncthreads();
  out[blockIdx.x * blockDim.x + i] = i == 0 ? -1 : slots[i - 1];
}

int wrong_neighbours(const std::vector<int>& out, unsigned threads) {
  int wrong = 0;
  for (std::size_t k = 0; k < out.size(); ++k) {
    const unsigned block = static_cast<unsigned>(k / threads),
                   i = static_cast<unsigned>(k % threads);
    const int expected = i == 0 ? -1 : static_cast<int>(block * 1000 + i - 1);
    wrong += out[k] != expected;
  }
  return wrong;
}

}  // namespace

TEST_CASE("a missing __syncthreads shows under a shuffled schedule, and the barrier fixes it") {
  const unsigned blocks = 8, threads = 128;
  DeviceBuffer<int> out(blocks * threads);
  {
    // Lane order runs each thread after the one it reads from: the race stays hidden.
    ScheduleScope scope({0, 1, false});
    KILN_LAUNCH(blocks, threads, 0, nullptr, neighbour_kernel<false>)(out.get());
    CHECK(wrong_neighbours(out.read(), threads) == 0);
  }
  for (std::uint64_t seed : {1, 2, 3}) {
    ScheduleScope scope({seed, 2, false});
    KILN_LAUNCH(blocks, threads, 0, nullptr, neighbour_kernel<false>)(out.get());
    INFO("seed " << seed);
    CHECK(wrong_neighbours(out.read(), threads) > 0);
  }
  for (const kiln::sim::Schedule& schedule : all_schedules()) {
    ScheduleScope scope(schedule);
    KILN_LAUNCH(blocks, threads, 0, nullptr, neighbour_kernel<true>)(out.get());
    INFO("seed " << schedule.seed << ", fibers " << schedule.fibers);
    CHECK(wrong_neighbours(out.read(), threads) == 0);
  }
}

namespace {

__global__ void atomics_kernel(float* f, double* d, int* i, unsigned* u, unsigned long long* ull,
                               unsigned* max_seen, int* min_seen, unsigned short* halves) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(f, 1.0f);
  atomicAdd(d, 0.5);
  atomicAdd(i, -1);
  atomicAdd(u, 2u);
  atomicAdd(ull, 1ull << 33);
  atomicMax(max_seen, t);
  atomicMin(min_seen, -static_cast<int>(t));
  // A 16-bit add as kiln's f16 atomics do it: a CAS loop on the 16-bit word.
  unsigned short old = *halves, seen;
  do {
    seen = old;
    old = atomicCAS(halves, seen, static_cast<unsigned short>(seen + 1));
  } while (old != seen);
}

}  // namespace

TEST_CASE("atomics add up across blocks and workers") {
  ScheduleScope scope({2, 2, false});
  DeviceBuffer<float> f(std::vector<float>{0});
  DeviceBuffer<double> d(std::vector<double>{0});
  DeviceBuffer<int> i(std::vector<int>{0});
  DeviceBuffer<unsigned> u(std::vector<unsigned>{0});
  DeviceBuffer<unsigned long long> ull(std::vector<unsigned long long>{0});
  DeviceBuffer<unsigned> max_seen(std::vector<unsigned>{0});
  DeviceBuffer<int> min_seen(std::vector<int>{0});
  DeviceBuffer<unsigned short> halves(std::vector<unsigned short>{0});
  const unsigned blocks = 50, threads = 128, n = blocks * threads;
  KILN_LAUNCH(blocks, threads, 0, nullptr, atomics_kernel)
  (f.get(), d.get(), i.get(), u.get(), ull.get(), max_seen.get(), min_seen.get(), halves.get());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(f.read()[0] == static_cast<float>(n));
  CHECK(d.read()[0] == 0.5 * n);
  CHECK(i.read()[0] == -static_cast<int>(n));
  CHECK(u.read()[0] == 2 * n);
  CHECK(ull.read()[0] == (static_cast<unsigned long long>(n) << 33));
  CHECK(max_seen.read()[0] == n - 1);
  CHECK(min_seen.read()[0] == -static_cast<int>(n - 1));
  CHECK(halves.read()[0] == n);
}

namespace {

__global__ void copy_kernel(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i] * 2;
}

__global__ void barrier_kernel(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[blockIdx.x * 64 + threadIdx.x] = s[63 - threadIdx.x];
}

// A kernel that changes its own by-value parameter: each thread has its own copy.
__global__ void parameter_kernel(int* out, int base) {
  base += static_cast<int>(threadIdx.x);
  out[threadIdx.x] = base;
}

}  // namespace

TEST_CASE("blocks that never wait run without fibers, a barrier promotes its block") {
  ScheduleScope scope({0, 1, false});
  const int n = 1000;
  std::vector<float> host(n);
  std::iota(host.begin(), host.end(), 0.0f);
  DeviceBuffer<float> in(host), out(n);
  const std::uint64_t before = kiln::sim::fibers_started();
  KILN_LAUNCH((n + 127) / 128, 128, 0, nullptr, copy_kernel)(in.get(), out.get(), n);
  CHECK(kiln::sim::fibers_started() == before);
  const std::vector<float> doubled = out.read();
  for (int k = 0; k < n; ++k) CHECK(doubled[k] == 2.0f * k);

  // Thread 0 waits first and stays on the worker's stack; the other 63 become fibers.
  DeviceBuffer<float> mirrored(4 * 64);
  KILN_LAUNCH(4, 64, 0, nullptr, barrier_kernel)(mirrored.get());
  CHECK(kiln::sim::fibers_started() == before + 4 * 63);
  const std::vector<float> m = mirrored.read();
  for (int k = 0; k < 4 * 64; ++k) CHECK(m[k] == static_cast<float>(63 - k % 64));

  DeviceBuffer<int> values(32);
  KILN_LAUNCH(1, 32, 0, nullptr, parameter_kernel)(values.get(), 10);
  const std::vector<int> v = values.read();
  for (int k = 0; k < 32; ++k) CHECK(v[k] == 10 + k);
}

TEST_CASE("KILN_SIM_FIBERS's schedule makes every thread a fiber") {
  ScheduleScope scope({0, 1, true});
  DeviceBuffer<float> in(std::vector<float>(256, 1.0f)), out(256);
  const std::uint64_t before = kiln::sim::fibers_started();
  KILN_LAUNCH(2, 128, 0, nullptr, copy_kernel)(in.get(), out.get(), 256);
  CHECK(kiln::sim::fibers_started() == before + 256);
  CHECK(out.read() == std::vector<float>(256, 2.0f));
}

namespace {

__global__ void dynamic_shared_kernel(unsigned* first_word, float* out) {
  KILN_DYNAMIC_SHARED(float, values);
  if (threadIdx.x == 0) first_word[blockIdx.x] = *reinterpret_cast<unsigned*>(values);
  __syncthreads();
  values[threadIdx.x] = static_cast<float>(blockIdx.x + threadIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = values[blockDim.x - 1 - threadIdx.x];
}

}  // namespace

TEST_CASE("dynamic shared memory: the launch's bytes, 0xFF at every block's start") {
  ScheduleScope scope({2, 2, false});
  DeviceBuffer<unsigned> first(6);
  DeviceBuffer<float> out(6 * 96);
  KILN_LAUNCH(6, 96, 96 * sizeof(float), nullptr, dynamic_shared_kernel)(first.get(), out.get());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(first.read() == std::vector<unsigned>(6, 0xFFFFFFFFu));
  const std::vector<float> o = out.read();
  for (unsigned k = 0; k < o.size(); ++k) CHECK(o[k] == static_cast<float>(k / 96 + 95 - k % 96));
}
