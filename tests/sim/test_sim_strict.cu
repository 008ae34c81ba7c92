// The strictness the instrumentation allows (sim/metrics/strict_memory.h, docs/simulator.md
// "Strictness"): planted bugs that fail with it on and pass with it off. Static __shared__ bytes
// no thread of the block wrote read as 0xFF; a block's global stores stay invisible to the other
// blocks until its __threadfence. This file is compiled with the instrumentation
// (tests/sim/CMakeLists.txt), as the kernel lab is; a file compiled without it has neither.
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "sim_test_support.h"

namespace {

constexpr int kLanes = 32;

// A planted bug: the lanes at and past `n` never write their slot, and lane 0 sums all 32, as if
// static shared memory started zeroed (which the simulator's thread-local arrays did, and a GPU
// does not promise).
__global__ void sum_unwritten_slots(const float* in, float* out, int n) {
  __shared__ float slots[kLanes];
  if (static_cast<int>(threadIdx.x) < n) slots[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int i = 0; i < kLanes; ++i) sum += slots[i];
    *out = sum;
  }
}

// Each block writes its partial, takes a ticket, and the last block to take one adds every
// partial (the lab's reduction v5_one_pass). `fence` false is the planted bug: nothing orders the
// partial's store before the ticket, so the last block may read another block's old partial.
__global__ void last_block_sums(const float* x, float* partial, unsigned* counter, float* out,
                                bool fence) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = 2.0f * x[blockIdx.x];
    if (fence) __threadfence();
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
    __threadfence();  // acquire: the other blocks' partials are read after the ticket
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    float sum = 0.0f;
    for (unsigned b = 0; b < gridDim.x; ++b) sum += __ldcg(&partial[b]);
    *out = sum;
  }
}

kiln::sim::Schedule one_worker() {
  kiln::sim::Schedule s = kiln::sim::schedule();
  s.workers = 1;  // blocks one after another: the outcome does not depend on timing
  return s;
}

float sum_of_unwritten_slots() {
  const DeviceBuffer<float> in(std::vector<float>(kLanes, 1.0f));
  const DeviceBuffer<float> out(1);
  KILN_LAUNCH(1, kLanes, 0, nullptr, sum_unwritten_slots)(in.get(), out.get(), 20);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return out.read()[0];
}

struct LastBlock {
  float sum;
  std::vector<float> partials;
};
LastBlock last_block(bool fence) {
  constexpr int kBlocks = 4;
  const DeviceBuffer<float> x(std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f});
  const DeviceBuffer<float> partial(kBlocks);  // fresh: 0xFF bytes, NaN
  const DeviceBuffer<unsigned> counter(std::vector<unsigned>{0});
  const DeviceBuffer<float> out(1);
  KILN_LAUNCH(kBlocks, kLanes, 0, nullptr, last_block_sums)
  (x.get(), partial.get(), counter.get(), out.get(), fence);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return {out.read()[0], partial.read()};
}

}  // namespace

TEST_CASE("static shared memory no thread wrote reads as 0xFF bytes, so the planted bug shows") {
  // Off first: once poisoned, the thread-local array keeps the 0xFF bytes.
  kiln::sim::Schedule before = one_worker();
  before.poison_static_shared = false;  // KILN_SIM_SHARED_POISON=0: the thread-local's zeros
  {
    const ScheduleScope scope(before);
    CHECK(sum_of_unwritten_slots() == 20.0f);  // the bug passes unseen
  }
  kiln::sim::Schedule strict = before;
  strict.poison_static_shared = true;
  const ScheduleScope scope(strict);
  CHECK(std::isnan(sum_of_unwritten_slots()));
  CHECK(std::isnan(sum_of_unwritten_slots()));  // every block, not the first on a worker only
}

TEST_CASE("a block's global stores are held until its __threadfence, so a missing fence shows") {
  kiln::sim::Schedule strict = one_worker();
  strict.hold_global_stores = true;
  const std::vector<float> partials{2.0f, 4.0f, 6.0f, 8.0f};
  {
    const ScheduleScope scope(strict);
    const LastBlock fenced = last_block(true);
    CHECK(fenced.sum == 20.0f);
    CHECK(fenced.partials == partials);
    const LastBlock unfenced = last_block(false);
    CHECK(std::isnan(unfenced.sum));       // the planted bug: the other blocks' partials were held
    CHECK(unfenced.partials == partials);  // and written when the grid ended
  }
  kiln::sim::Schedule before = strict;
  before.hold_global_stores = false;  // KILN_SIM_HOLD_STORES=0
  const ScheduleScope scope(before);
  const LastBlock unfenced = last_block(false);
  CHECK(unfenced.sum == 20.0f);  // the bug passes unseen
  CHECK(unfenced.partials == partials);
}
