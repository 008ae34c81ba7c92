// What a profiler would count, counted by the simulator (docs/simulator.md, "Counting"): per
// kernel, over its launches, the warp-level memory instructions its lanes issue, grouped as a warp
// issues them (the lanes of a warp at the same instruction, the n-th time each reaches it): global
// requests against the 32-byte sectors they touch and the bytes they use, shared-memory requests
// against the wavefronts their bank conflicts take, and the lanes active at each instruction.
//
// Only code compiled with the counting instrumentation is seen (kiln_sim_counted_sources in
// cmake/KilnCudaSim.cmake: the kernel lab in a simulator build without KILN_SANITIZE). Counting is
// off unless KILN_SIM_METRICS=1 or set_counting(true); off, an instrumented access costs a call
// and a test of a thread-local pointer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::sim {

struct KernelCounts {
  std::string kernel;  // as KILN_LAUNCH names it
  std::uint64_t launches = 0;
  // The launch's shape, the largest over the launches: threads a block, dynamic shared bytes.
  unsigned threads_per_block = 0;
  std::uint64_t dynamic_shared_bytes = 0;
  // Global memory, one request per warp-level instruction. bytes: the distinct bytes its lanes
  // asked for, so bytes / (32 x sectors) is the coalescing efficiency.
  std::uint64_t load_requests = 0, load_sectors = 0, load_bytes = 0;
  std::uint64_t store_requests = 0, store_sectors = 0, store_bytes = 0;
  std::uint64_t atomic_requests = 0, atomic_sectors = 0, atomic_bytes = 0;
  // The distinct sectors of device memory each launch read and wrote, in bytes, summed over the
  // launches: the least a launch moves between DRAM and the chip (every sector once).
  std::uint64_t unique_read_bytes = 0, unique_write_bytes = 0;
  // Shared memory, loads and stores (atomics among them): wavefronts / ideal is the n of an n-way
  // bank conflict, averaged over the requests.
  std::uint64_t shared_load_requests = 0, shared_load_wavefronts = 0, shared_load_ideal = 0;
  std::uint64_t shared_store_requests = 0, shared_store_wavefronts = 0, shared_store_ideal = 0;
  // Every counted instruction: the lanes active at it, and the lanes its warp has (32, fewer in a
  // block's last warp), so active_lanes / lane_slots is the lanes' efficiency under divergence.
  std::uint64_t instructions = 0, active_lanes = 0, lane_slots = 0;

  KernelCounts& operator+=(const KernelCounts& other);  // the sums; kernel stays
  bool operator==(const KernelCounts& other) const = default;
};

inline KernelCounts& KernelCounts::operator+=(const KernelCounts& o) {
  launches += o.launches;
  threads_per_block = std::max(threads_per_block, o.threads_per_block);
  dynamic_shared_bytes = std::max(dynamic_shared_bytes, o.dynamic_shared_bytes);
  load_requests += o.load_requests, load_sectors += o.load_sectors, load_bytes += o.load_bytes;
  store_requests += o.store_requests, store_sectors += o.store_sectors,
      store_bytes += o.store_bytes;
  atomic_requests += o.atomic_requests, atomic_sectors += o.atomic_sectors,
      atomic_bytes += o.atomic_bytes;
  unique_read_bytes += o.unique_read_bytes, unique_write_bytes += o.unique_write_bytes;
  shared_load_requests += o.shared_load_requests,
      shared_load_wavefronts += o.shared_load_wavefronts, shared_load_ideal += o.shared_load_ideal;
  shared_store_requests += o.shared_store_requests,
      shared_store_wavefronts += o.shared_store_wavefronts,
      shared_store_ideal += o.shared_store_ideal;
  instructions += o.instructions, active_lanes += o.active_lanes, lane_slots += o.lane_slots;
  return *this;
}

// Whether launches are counted now (first read from KILN_SIM_METRICS: 1 on, 0 or unset off).
bool counting();
void set_counting(bool on);
// Source files compiled with the counting instrumentation in this process (each registers itself
// when it loads): 0 means nothing can be counted, whatever counting() says.
int counted_files();
// The counts since the last call, one entry a kernel in the order each first ran, and forgets
// them. A launch counts once its grid has run.
std::vector<KernelCounts> take_counts();

}  // namespace kiln::sim
