// The layer-norm lab's host-side arithmetic (kernels/cuda/lab/layernorm/): block shapes, grids
// and workspace of each version, forward and backward. Plain C++, checked on the CPU by
// tests/test_lab_tiling.cpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace kiln::lab::layernorm {

inline constexpr int kWarpSize = 32;
inline constexpr int64_t kMaxGridBlocks = 2147483647;  // gridDim.x's limit; blocks loop past it

inline constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
inline constexpr int64_t round_up(int64_t a, int64_t multiple) {
  return ceil_div(a, multiple) * multiple;
}

// v1: a thread per row, kThreads rows a block. Also the block of the column-sum kernels.
inline constexpr int kThreads = 256;
// v2: a warp per row, kWarpsPerBlock rows a block.
inline constexpr int kWarpsPerBlock = 8;
// v2's backward: a block takes kRowsPerBlock consecutive rows, and writes one partial of dweight
// and dbias for them.
inline constexpr int64_t kRowsPerBlock = 64;
// v3: a block per row holding it in registers, kElementsPerThread floats a thread (rows up to
// kMaxThreads * kElementsPerThread; longer rows take v2).
inline constexpr int kElementsPerThread = 16;
inline constexpr int kMaxThreads = 1024;
// v3's backward: rows up to kBackwardMaxThreads * kElementsPerThread (longer rows take v2), a fixed
// grid of kBackwardBlocks blocks, each walking rows b, b + kBackwardBlocks,
// ... and keeping its threads' columns of dweight and dbias in registers.
inline constexpr int64_t kBackwardBlocks = 512;

inline int64_t v1_blocks(int64_t rows) {
  return std::clamp<int64_t>(ceil_div(rows, kThreads), 1, kMaxGridBlocks);
}
inline int64_t v2_blocks(int64_t rows) {
  return std::clamp<int64_t>(ceil_div(rows, kWarpsPerBlock), 1, kMaxGridBlocks);
}
inline int64_t v2_backward_blocks(int64_t rows) {
  return std::max<int64_t>(1, ceil_div(rows, kRowsPerBlock));
}
inline int64_t column_blocks(int64_t cols) {
  return std::max<int64_t>(1, ceil_div(cols, kThreads));
}
inline bool v3_cached(int64_t cols) {
  return cols <= int64_t{kMaxThreads} * kElementsPerThread;
}
inline int v3_width(int64_t cols, bool aligned_base) {
  return cols % 4 == 0 && aligned_base ? 4 : 1;
}
inline int v3_threads(int64_t cols) {
  return static_cast<int>(std::clamp<int64_t>(
      round_up(ceil_div(cols, kElementsPerThread), kWarpSize), kWarpSize, kMaxThreads));
}
// The backward holds x_hat and dy (two floats an element) and its columns' dweight and dbias
// partials: at most kBackwardMaxThreads threads, so the compiler may give each 128 registers.
inline constexpr int kBackwardMaxThreads = 512;
inline bool v3_backward_cached(int64_t cols) {
  return cols <= int64_t{kBackwardMaxThreads} * kElementsPerThread;
}
inline int64_t v3_backward_blocks(int64_t rows) {
  return std::clamp<int64_t>(rows, 1, kBackwardBlocks);
}

// The backward's workspace: the per-block partials of dweight and dbias, [blocks, cols] each.
inline size_t backward_workspace_bytes(int64_t rows, int64_t cols) {
  const int64_t blocks = std::max(v2_backward_blocks(rows), v3_backward_blocks(rows));
  return static_cast<size_t>(2 * blocks * cols) * sizeof(float);
}

// Bytes the forward moves at least: x read, y written (weight, bias, mean and rstd are noise).
inline double forward_bytes(int64_t rows, int64_t cols) {
  return 8.0 * static_cast<double>(rows) * static_cast<double>(cols);
}
// The backward: x and dy read, dx written.
inline double backward_bytes(int64_t rows, int64_t cols) {
  return 12.0 * static_cast<double>(rows) * static_cast<double>(cols);
}

}  // namespace kiln::lab::layernorm
