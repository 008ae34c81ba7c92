// The softmax lab's host-side arithmetic (kernels/cuda/lab/softmax/): block shapes and grids of
// each version, and when v4 holds a row in registers. Plain C++, checked on the CPU by
// tests/test_lab_tiling.cpp.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kiln::lab::softmax {

inline constexpr int kWarpSize = 32;
inline constexpr int64_t kMaxGridBlocks = 2147483647;  // gridDim.x's limit; blocks loop past it

inline constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
inline constexpr int64_t round_up(int64_t a, int64_t multiple) {
  return ceil_div(a, multiple) * multiple;
}

// v1, v2: a block of kRowThreads per row.
inline constexpr int kRowThreads = 256;
// v3: a warp per row, kWarpsPerBlock rows a block.
inline constexpr int kWarpsPerBlock = 8;
inline constexpr int kWarpRowThreads = kWarpSize * kWarpsPerBlock;

// v4: a block per row whose threads hold the row in registers, kElementsPerThread floats each (as
// 4 float4s, or 16 floats where the row is not a multiple of 4), so the row is read from memory
// once. Rows longer than kMaxThreads * kElementsPerThread stream instead (two reads, as v2).
inline constexpr int kElementsPerThread = 16;
inline constexpr int kMaxThreads = 1024;
inline constexpr int kStreamThreads = 512;

inline int64_t v1_blocks(int64_t rows) {
  return std::clamp<int64_t>(rows, 1, kMaxGridBlocks);
}
inline int64_t v3_blocks(int64_t rows) {
  return std::clamp<int64_t>(ceil_div(rows, kWarpsPerBlock), 1, kMaxGridBlocks);
}

// Floats in one load of v4: 4 (a float4) when every row starts on 16 bytes, else 1.
inline int v4_width(int64_t cols, bool aligned_base) {
  return cols % 4 == 0 && aligned_base ? 4 : 1;
}
inline bool v4_cached(int64_t cols) {
  return cols <= int64_t{kMaxThreads} * kElementsPerThread;
}
// v4's threads for a row of `cols` held in registers: enough whole warps that each holds at most
// kElementsPerThread elements.
inline int v4_threads(int64_t cols) {
  if (!v4_cached(cols)) return kStreamThreads;
  return static_cast<int>(std::clamp<int64_t>(
      round_up(ceil_div(cols, kElementsPerThread), kWarpSize), kWarpSize, kMaxThreads));
}

// Bytes the softmax of [rows, cols] has to move at least: x read once and y written once.
inline double bytes_moved(int64_t rows, int64_t cols) {
  return 8.0 * static_cast<double>(rows) * static_cast<double>(cols);
}

}  // namespace kiln::lab::softmax
