// The simulator's side of counting (counts.h): the instrumentation's hooks (hooks.cpp) record
// each access of the running CUDA thread; the block runner brackets each block, and the worker
// pool each grid, so that a block's accesses are grouped into warp instructions when it ends and
// a grid's totals are kept when it has run.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::sim::metrics {

enum class Kind : std::uint8_t { load, store, atomic };

// This OS thread's recording while a counted block runs on it, else null: the hooks test it before
// anything else, so that an access costs a call and this test when nothing is counted.
struct ThreadRecorder;
extern thread_local ThreadRecorder* active;

// From the hooks: an access by the running CUDA thread, at `site` (the instrumented instruction).
// Nothing unless a counted block runs on this OS thread.
void record(const void* address, std::size_t bytes, Kind kind, const void* site);
void note_counted_file();

// From the worker pool, one grid at a time: whether this grid is counted (counting() when it
// starts), and its totals once every block has ended.
void begin_grid(const char* kernel, unsigned threads_per_block, std::size_t shared_bytes);
void end_grid();
// From the block runner, around each block; dynamic shared memory is [shared, shared + bytes).
void begin_block(unsigned threads_per_block, const void* shared, std::size_t bytes);
void end_block();

}  // namespace kiln::sim::metrics
