// What the simulator's kernel-side shim (sim/cuda_sim.h) asks of the scheduler: the running
// CUDA thread's coordinates, and the two kinds of waiting, at a block barrier and at a warp
// collective. A kernel never calls these directly; it calls CUDA's names, which the shim maps here.
#pragma once

#include <vector_types.h>

#include <cstdint>
#include <source_location>

namespace kiln::sim {

// The built-in variables of the CUDA thread now running on this OS thread. The scheduler sets
// them before every resume; a fiber never moves to another OS thread, so they stay valid.
namespace current {
inline thread_local uint3 thread_idx{};
inline thread_local uint3 block_idx{};
inline thread_local dim3 block_dim{};
inline thread_local dim3 grid_dim{};
}  // namespace current

// A warp collective: shuffles (value moves between lanes), votes (ballot, any, all) and
// __syncwarp (none). Every lane named in `mask` must reach the same call site with the same mask.
enum class WarpOp : std::uint8_t { shfl, shfl_xor, shfl_up, shfl_down, ballot, any, all, sync };

struct WarpRequest {
  WarpOp op;
  unsigned mask;
  std::uint64_t value;  // the lane's value (shuffles, up to 8 bytes) or predicate (votes)
  int argument;         // source lane, lane mask or delta (shuffles)
  int width;            // shuffles: a power of two up to 32
};

const char* warp_op_name(WarpOp op);

// __syncthreads: returns once every thread of the block has reached the same call site.
void block_barrier(const std::source_location& where);

// Returns the lane's result: the moved value (shuffles), the ballot bits, or 0/1 (any, all).
std::uint64_t warp_collective(const WarpRequest& request, const std::source_location& where);

// The block's dynamic shared memory (the launch's shared_bytes, 16-byte aligned).
void* dynamic_shared_memory();

}  // namespace kiln::sim
