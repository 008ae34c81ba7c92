// The reduction lab's host-side arithmetic (kernels/cuda/lab/reduction/): how each version cuts
// the sums of the rows of a [rows, cols] matrix into blocks and passes, and the workspace the
// passes need. Plain C++, so tests/test_lab_tiling.cpp checks it on the CPU.
//
// Every version reduces in passes. A pass turns [rows, cols] into [rows, splits]: block (r, s)
// sums row r's elements [s * chunk, min((s + 1) * chunk, cols)) into one partial. Passes repeat
// on the partials until one split is left, whose pass writes out[r]. A sum over a vector is the
// case rows == 1.
//
//   v1-v3 give each block a fixed chunk (one element or one float4 a thread), so a long row takes
//         several passes: 2^28 elements are 2^20 partials, then 2^12, then 16, then 1 in v1 and
//         v2 (256 elements a block); 2^18, then 256, then 1 in v3 (1024).
//   v4    gives each block several float4s a thread, with the number of blocks set so that the
//         whole grid is about kTargetBlocks: two passes at most (the second sums <= that many).
//   v5    v4's first pass, where the last block of each row to finish sums the row's partials:
//         one launch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::lab::reduction {

// Threads of every version's blocks: eight warps.
inline constexpr int kThreads = 256;
inline constexpr int kWarpSize = 32;
// Floats in one 16-byte load (float4).
inline constexpr int kVectorWidth = 4;
// v4, v5: float4 loads a thread has in flight before it adds the first of them.
inline constexpr int kUnroll = 4;
// v4, v5: blocks of the first pass, about 16 of kThreads per SM on a 132-SM H200 (two waves of
// the 8 blocks an SM holds at once), enough to keep every SM's loads in flight.
inline constexpr int64_t kTargetBlocks = 2048;
// The most blocks a pass launches; past it blocks loop over the (row, split) pairs.
inline constexpr int64_t kMaxGridBlocks = 2147483647;  // gridDim.x's limit, 2^31 - 1

inline constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
inline constexpr int64_t round_up(int64_t a, int64_t multiple) {
  return ceil_div(a, multiple) * multiple;
}

// Elements a block of v1, v2, v3 sums: one a thread, one a thread, one float4 a thread.
inline constexpr int64_t kChunkV1 = kThreads;
inline constexpr int64_t kChunkV2 = kThreads;
inline constexpr int64_t kChunkV3 = int64_t{kThreads} * kVectorWidth;
// v4, v5: a block's chunk is a whole number of these steps (every thread's kUnroll float4s).
inline constexpr int64_t kStepV4 = int64_t{kThreads} * kVectorWidth * kUnroll;

// One pass: [rows, cols] -> [rows, splits] with `chunk` elements a block.
struct Pass {
  int64_t cols = 0;
  int64_t chunk = 0;
  int64_t splits = 0;
};

// Fixed chunks (v1-v3): passes until one split is left. A row of 0 elements still takes one
// pass, which writes 0.
inline std::vector<Pass> chunked_passes(int64_t cols, int64_t chunk) {
  std::vector<Pass> passes;
  do {
    const int64_t splits = std::max<int64_t>(1, ceil_div(cols, chunk));
    passes.push_back({cols, chunk, splits});
    cols = splits;
  } while (cols > 1);
  return passes;
}

// v4, v5: the first pass splits each row so that rows * splits is about kTargetBlocks (one
// split a row once there are that many rows), each chunk a whole number of kStepV4 steps; when
// that leaves several splits, a second pass sums each row's partials in one block.
inline std::vector<Pass> grid_stride_passes(int64_t rows, int64_t cols) {
  const int64_t most_splits = std::max<int64_t>(1, ceil_div(cols, kStepV4));
  const int64_t wanted =
      std::clamp<int64_t>(ceil_div(kTargetBlocks, std::max<int64_t>(rows, 1)), 1, most_splits);
  const int64_t chunk = std::max<int64_t>(kStepV4, round_up(ceil_div(cols, wanted), kStepV4));
  const int64_t splits = std::max<int64_t>(1, ceil_div(cols, chunk));
  std::vector<Pass> passes{{cols, chunk, splits}};
  if (splits > 1) passes.push_back({splits, round_up(splits, kStepV4), 1});
  return passes;
}

// Blocks a pass launches (they loop over the rows * splits pairs past kMaxGridBlocks, or past
// `cap` for v4 and v5, whose grid is a performance choice).
inline int64_t pass_blocks(int64_t rows, const Pass& pass, int64_t cap = kMaxGridBlocks) {
  return std::clamp<int64_t>(rows * pass.splits, 1, cap);
}

// The workspace every version shares, one allocation zeroed once before its first use:
//   counters  rows unsigned ints: v5's per-row count of finished blocks, which v5 puts back to 0
//             when it finishes a row, so the next launch finds them zero;
//   first     the partials of passes 1, 3, 5, ...;
//   second    the partials of passes 2, 4, ...;
// each starting on a 256-byte boundary (a float4 load needs 16).
struct WorkspaceLayout {
  size_t first_offset = 0;
  size_t second_offset = 0;
  size_t bytes = 0;
};

inline constexpr size_t kWorkspaceAlignment = 256;

inline size_t align_bytes(size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// Floats of partials the passes need in the first and second buffers: pass i writes buffer i % 2,
// except the last pass, which writes the output.
inline void partial_floats(int64_t rows, const std::vector<Pass>& passes, int64_t& first,
                           int64_t& second) {
  for (size_t i = 0; i + 1 < passes.size(); ++i) {
    int64_t& buffer = i % 2 == 0 ? first : second;
    buffer = std::max(buffer, rows * passes[i].splits);
  }
}

// The layout for the largest needs of v1-v5 on a [rows, cols] problem (version 0, CUB, adds its
// own temporary storage: versions.h's workspace_bytes).
inline WorkspaceLayout workspace_layout(int64_t rows, int64_t cols) {
  int64_t first = 0, second = 0;
  for (int64_t chunk : {kChunkV1, kChunkV2, kChunkV3})
    partial_floats(rows, chunked_passes(cols, chunk), first, second);
  const std::vector<Pass> grid_stride = grid_stride_passes(rows, cols);
  // v5 keeps the same first-pass partials as v4, in the first buffer.
  partial_floats(rows, grid_stride, first, second);
  WorkspaceLayout layout;
  layout.first_offset = align_bytes(static_cast<size_t>(rows) * sizeof(unsigned));
  layout.second_offset = layout.first_offset + align_bytes(static_cast<size_t>(first) * 4);
  layout.bytes = layout.second_offset + align_bytes(static_cast<size_t>(second) * 4);
  return layout;
}

// Bytes a version reads and writes: what its GB/s is counted from (the partials, a few bytes a
// block, are left out, as they are of the library's figure).
inline double bytes_moved(int64_t rows, int64_t cols) {
  return 4.0 * static_cast<double>(rows) * static_cast<double>(cols + 1);
}

}  // namespace kiln::lab::reduction
