// What the instrumentation of kiln_sim_counted_sources (cmake/KilnCudaSim.cmake, the hooks of
// hooks.cpp) lets the simulator hold strictly, in the files compiled with it, where a GPU leaves
// the outcome to timing or to what memory held before (docs/simulator.md, "Strictness"):
//
// - static __shared__ memory: a byte that no thread of the block has written holds 0xFF when read
//   (Schedule::poison_static_shared), as dynamic shared memory does from each block's start. The
//   poison is written at the first read, so it is what the block would have read had its static
//   shared memory been poisoned when it started; a kernel that reads what it never wrote sees NaN
//   rather than the previous block's values.
// - global stores: a block's plain stores to device memory stay invisible to the grid's other
//   blocks until the block runs __threadfence (Schedule::hold_global_stores). When the block
//   ends, the bytes of its stores since its last fence are put back to what they held before the
//   block wrote them, and written again when the grid ends, as CUDA promises nothing about when
//   another block sees an unfenced store. The stores a block holds when it runs an atomic
//   operation on device memory stay held until the grid ends, whatever fences follow: another
//   block may see the atomic's result before them. So a cross-block protocol missing its fence (a
//   block writes its partial and takes a ticket with atomicAdd, and the last block reads every
//   partial) reads the old bytes. Atomics and volatile stores are not held: they are how blocks
//   signal.
//
// The threads of a block run on one OS thread, so each OS thread keeps its block's state.
#pragma once

#include <cstddef>

namespace kiln::sim::strict {

struct BlockMemory;
// This OS thread's state while a block runs on it with either strictness on, else null.
extern thread_local BlockMemory* active;

// From the hooks, before the access: a load (an atomic load too), a plain store, a store that is
// not held (volatile, or cp.async's), an atomic operation that writes.
void load(const void* address, std::size_t bytes);
void store(const void* address, std::size_t bytes);
void unheld_store(const void* address, std::size_t bytes);
void atomic(const void* address, std::size_t bytes);
// __threadfence and __threadfence_system: the block's stores so far that no atomic of the block
// followed become visible.
void fence();

// From the block runner around each block; dynamic shared memory is [shared, shared + bytes) and
// is neither static shared nor global memory here.
void begin_block(const void* shared, std::size_t bytes);
void end_block();
// From the worker pool after every block of a grid has ended: the held stores are written.
void end_grid();

}  // namespace kiln::sim::strict
