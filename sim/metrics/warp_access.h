// What one warp-level memory instruction costs, from the addresses its lanes gave: the 32-byte
// sectors a global access touches against the bytes it uses (coalescing), and the wavefronts a
// shared-memory access takes across 32 banks of 4 bytes (bank conflicts), as on sm_70-sm_90.
// Plain arithmetic on lists of lane accesses: the recorder (recorder.h) feeds it, tests check it.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::sim::metrics {

struct LaneAccess {
  std::uint64_t address;
  std::uint32_t bytes;
  unsigned lane;  // 0-31
};

struct GlobalCost {
  std::uint64_t sectors;     // distinct 32-byte sectors touched
  std::uint64_t bytes_used;  // distinct bytes the lanes asked for
};
GlobalCost global_cost(const std::vector<LaneAccess>& lanes);

// A shared access is served in phases: the whole warp for accesses of up to 4 bytes, half-warps
// for 8 bytes, quarter-warps for 16. In each phase a bank serves one 4-byte word a wavefront, and
// lanes reading the same word share it (a broadcast), so a phase takes as many wavefronts as the
// most distinct words any bank holds. ideal: the phases with an active lane, one wavefront each.
struct SharedCost {
  std::uint64_t wavefronts;
  std::uint64_t ideal;
};
SharedCost shared_cost(const std::vector<LaneAccess>& lanes);

}  // namespace kiln::sim::metrics
