#include "kiln/sim/ptx.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <source_location>
#include <utility>
#include <vector>

#include "kiln/sim/device_api.h"
#include "kiln/sim/metrics/recorder.h"
#include "kiln/sim/metrics/strict_memory.h"

namespace kiln::sim::ptx {

namespace {

constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kWarpSize = 32;
constexpr int kMaxWarps = 32;  // 1024 threads a block
constexpr int kSlotWords = 6;  // mma: 4 registers of A and 2 of B; ldmatrix: 1 address

struct Lane {
  unsigned lane;
  unsigned warp;
};

Lane this_lane() {
  const uint3& t = current::thread_idx;
  const dim3& d = current::block_dim;
  const unsigned linear = t.x + d.x * (t.y + d.y * t.z);
  return {linear % kWarpSize, linear / kWarpSize};
}

// The slots of the warps of the block this worker runs: a worker runs one block at a time, and
// its CUDA threads (fibers) all run on it, so a thread-local array is the block's.
using WarpSlots = std::array<std::array<std::uint64_t, kSlotWords>, kWarpSize>;
thread_local std::array<WarpSlots, kMaxWarps> slots;

void warp_barrier(const std::source_location& where) {
  warp_collective({WarpOp::sync, kFullWarp, 0, 0, kWarpSize}, where);
}

std::uint16_t half_of(unsigned word, int half) {
  return static_cast<std::uint16_t>(half == 0 ? word & 0xffffu : word >> 16);
}

float to_float(std::uint16_t bits, MmaType type) {
  if (type == MmaType::bf16) {
    const std::uint32_t wide = std::uint32_t{bits} << 16;
    float f;
    std::memcpy(&f, &wide, sizeof f);
    return f;
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

// cp.async: a thread's copies not yet landed, oldest group first; the open group is the last.
struct PendingCopy {
  void* dst;
  const void* src;
  unsigned src_bytes;
};
struct ThreadCopies {
  uint3 block{};
  dim3 grid{};
  std::deque<std::vector<PendingCopy>> committed;
  std::vector<PendingCopy> open;
};
thread_local std::vector<ThreadCopies> copies;  // by the thread's index in its block

// The calling CUDA thread's queue. A block index or grid shape other than the one recorded means
// a new block on this worker: what an earlier block left (it exited without waiting, which CUDA
// allows) is dropped, as that block's copies would have landed long before.
ThreadCopies& my_copies() {
  const uint3& t = current::thread_idx;
  const dim3& d = current::block_dim;
  const std::size_t linear = t.x + d.x * (t.y + std::size_t{d.y} * t.z);
  if (copies.size() <= linear) copies.resize(linear + 1);
  ThreadCopies& mine = copies[linear];
  const uint3& b = current::block_idx;
  const dim3& g = current::grid_dim;
  if (mine.block.x != b.x || mine.block.y != b.y || mine.block.z != b.z || mine.grid.x != g.x ||
      mine.grid.y != g.y || mine.grid.z != g.z) {
    mine = ThreadCopies{b, g, {}, {}};
  }
  return mine;
}

void land(const PendingCopy& c) {
  std::memcpy(c.dst, c.src, c.src_bytes);
  std::memset(static_cast<unsigned char*>(c.dst) + c.src_bytes, 0, 16 - c.src_bytes);
}

}  // namespace

void ldmatrix_x4(unsigned (&r)[4], SharedAddress address, bool transposed,
                 const std::source_location& where) {
  // Counted (sim/metrics) as a shared load of the 16-byte row each lane gives.
  metrics::record(address, 16, metrics::Kind::load, __builtin_return_address(0));
  const Lane me = this_lane();
  WarpSlots& warp = slots[me.warp];
  warp[me.lane][0] = reinterpret_cast<std::uintptr_t>(address);
  warp_barrier(where);
  auto row_of = [&](unsigned lane) {
    return reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(warp[lane][0]));
  };
  const unsigned g = me.lane / 4, t = me.lane % 4;
  for (unsigned i = 0; i < 4; ++i) {
    if (!transposed) {
      std::memcpy(&r[i], row_of(8 * i + g) + 4 * t, sizeof r[i]);
    } else {
      std::uint16_t low, high;
      std::memcpy(&low, row_of(8 * i + 2 * t) + 2 * g, sizeof low);
      std::memcpy(&high, row_of(8 * i + 2 * t + 1) + 2 * g, sizeof high);
      r[i] = unsigned{low} | (unsigned{high} << 16);
    }
  }
  warp_barrier(where);  // no lane may overwrite its slot while another still reads it
}

void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], MmaType type,
                  const std::source_location& where) {
  const Lane me = this_lane();
  WarpSlots& warp = slots[me.warp];
  for (int i = 0; i < 4; ++i) warp[me.lane][i] = a[i];
  for (int i = 0; i < 2; ++i) warp[me.lane][4 + i] = b[i];
  warp_barrier(where);
  auto a_at = [&](unsigned row, unsigned k) {
    const auto word = static_cast<unsigned>(
        warp[4 * (row % 8) + (k % 8) / 2][(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)]);
    return to_float(half_of(word, static_cast<int>(k % 2)), type);
  };
  auto b_at = [&](unsigned k, unsigned n) {
    const auto word = static_cast<unsigned>(warp[4 * n + (k % 8) / 2][4 + (k >= 8 ? 1 : 0)]);
    return to_float(half_of(word, static_cast<int>(k % 2)), type);
  };
  const unsigned g = me.lane / 4, t = me.lane % 4;
  float result[4];
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    float sum = d[i];
    for (unsigned k = 0; k < 16; ++k) sum += a_at(row, k) * b_at(k, col);
    result[i] = sum;
  }
  warp_barrier(where);
  for (int i = 0; i < 4; ++i) d[i] = result[i];
}

void cp_async_16(void* dst, const void* src, unsigned src_bytes) {
  // Counted (sim/metrics) at its issue, as a global load and a shared store.
  const void* site = __builtin_return_address(0);
  metrics::record(src, src_bytes > 16 ? 16 : src_bytes, metrics::Kind::load, site);
  metrics::record(dst, 16, metrics::Kind::store, site);
  // Written (NaN until it lands) for the strictness of an instrumented caller, not held.
  if (strict::active) strict::unheld_store(dst, 16);
  std::memset(dst, 0xff, 16);  // NaN until the wait that lands it
  my_copies().open.push_back({dst, src, src_bytes > 16 ? 16 : src_bytes});
}

void cp_async_commit() {
  ThreadCopies& mine = my_copies();
  mine.committed.push_back(std::move(mine.open));
  mine.open.clear();
}

void cp_async_wait(int groups_in_flight) {
  ThreadCopies& mine = my_copies();
  while (mine.committed.size() > static_cast<std::size_t>(groups_in_flight)) {
    for (const PendingCopy& c : mine.committed.front()) land(c);
    mine.committed.pop_front();
  }
}

}  // namespace kiln::sim::ptx
