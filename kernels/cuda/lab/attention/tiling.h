// The attention lab's host-side arithmetic (kernels/cuda/lab/attention/): block shapes, tiles,
// shared-memory bytes, grids and workspace of each version, and the bytes each one moves. Plain
// C++, checked on the CPU by tests/test_lab_tiling.cpp and kiln-bench lab's smoke path.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kiln/kernels/cuda/lab/lab.h"

namespace kiln::lab::attention {

inline constexpr int kWarpSize = 32;
// Every version holds a query row (v2, the backward: D / 32 floats a lane) or a tile's rows (v3,
// v4) in registers or static shared memory sized for this head dimension at most.
inline constexpr int kMaxHeadDim = 128;
inline constexpr int kMaxPerLane = kMaxHeadDim / kWarpSize;  // v2, the backward: 4 floats a lane
inline constexpr int64_t kMaxGridBlocks = 2147483647;  // gridDim.x's limit; blocks loop past it

inline constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Query l attends key s: always without the mask; with it, s <= l (top-left aligned, as
// PyTorch's is_causal, also when L != S: the last S - L keys are then seen by no query when
// S > L, and every query sees key 0, so no row is ever wholly masked).
KILN_HOST_DEVICE inline bool attends(bool causal, int64_t l, int64_t s) {
  return !causal || s <= l;
}
// The keys query l attends: [0, keys_for(l)).
KILN_HOST_DEVICE inline int64_t keys_for(bool causal, int64_t l, int64_t s) {
  return causal ? (l + 1 < s ? l + 1 : s) : s;
}

// v1: three kernels over the L x S matrix, a thread per score, a warp per row for the softmax, a
// thread per output element; kNaiveThreads a block.
inline constexpr int kNaiveThreads = 256;
inline constexpr int kRowWarps = 8;  // v1's softmax, v2, the backward: a warp per row
inline constexpr int kRowThreads = kRowWarps * kWarpSize;

inline int64_t blocks_for(int64_t items, int64_t per_block) {
  return std::clamp<int64_t>(ceil_div(items, per_block), 1, kMaxGridBlocks);
}

// v3: FlashAttention-1. A block per head; its kV3Warps warps own kV3RowsPerWarp of the
// kV3QueryTile query rows of each query tile, and a key tile is kV3KeyTile keys (a lane a key).
inline constexpr int kV3QueryTile = 16;  // Br
inline constexpr int kV3KeyTile = 32;    // Bc = the warp's width: lane c scores key c of the tile
inline constexpr int kV3Warps = 4;
inline constexpr int kV3Threads = kV3Warps * kWarpSize;
inline constexpr int kV3RowsPerWarp = kV3QueryTile / kV3Warps;
// Shared memory: Q [Br][D], K [Bc][D + 1] (the +1: lane c reads row c, and rows D apart would all
// sit in one bank when D is a multiple of 32), V [Bc][D], P [Br][Bc], all f32, sized for
// kMaxHeadDim.
inline constexpr int kV3KStride = kMaxHeadDim + 1;
inline constexpr size_t v3_shared_bytes() {
  return 4 * (size_t{kV3QueryTile} * kMaxHeadDim + size_t{kV3KeyTile} * kV3KStride +
              size_t{kV3KeyTile} * kMaxHeadDim + size_t{kV3QueryTile} * kV3KeyTile);
}

// v4: FlashAttention-2 on tensor cores. A block per kV4QueryTile query rows of a head; each of its
// kV4Warps warps owns 16 of them (one mma.m16n8k16 row tile) for the whole pass over the keys, in
// key tiles of kV4KeyTile. The head dimension must be one of kV4HeadDims (its fragments are
// arrays of D / 16 and D / 8 registers).
inline constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;
inline constexpr int kV4Warps = 4;
inline constexpr int kV4Threads = kV4Warps * kWarpSize;
inline constexpr int kV4QueryTile = kV4Warps * kMmaM;  // 64
inline constexpr int kV4KeyTile = 32;
inline constexpr int kV4Pad = 8;  // elements a shared row is padded by (gemm_tc/tiling.h says why)
inline constexpr int kV4HeadDims[] = {16, 32, 64, 128};
inline constexpr bool v4_head_dim_supported(int64_t d) {
  for (int supported : kV4HeadDims)
    if (d == supported) return true;
  return false;
}
KILN_HOST_DEVICE inline constexpr int v4_stride(int d) {
  return d + kV4Pad;
}
// ldmatrix's 8 rows of 16 bytes fall on disjoint banks when the stride is an odd number of
// 16-byte units.
KILN_HOST_DEVICE inline constexpr bool v4_conflict_free(int d) {
  return v4_stride(d) * 2 % 16 == 0 && v4_stride(d) * 2 / 16 % 2 == 1;
}
// Q [64][D + 8], K and V [32][D + 8], 16-bit.
KILN_HOST_DEVICE inline constexpr size_t v4_shared_bytes(int d) {
  return 2 * static_cast<size_t>(v4_stride(d)) * (kV4QueryTile + 2 * kV4KeyTile);
}
inline int64_t v4_blocks(int64_t batch_heads, int64_t l) {
  return batch_heads * ceil_div(l, kV4QueryTile);
}

// v5 (the tiled backward): a block per kV5KeyTile keys of a head (a lane a key), walking the
// query tiles of kV5QueryTile rows, kV5RowsPerWarp of them a warp. Shared memory: K and V [Bc][D
// + 1] (lane c reads row c), Q and dO [Br][D], P~ and dS [Br][Bc], all f32, sized for kMaxHeadDim.
inline constexpr int kV5KeyTile = 32;
inline constexpr int kV5QueryTile = 8;
inline constexpr int kV5Warps = 4;
inline constexpr int kV5Threads = kV5Warps * kWarpSize;
inline constexpr int kV5RowsPerWarp = kV5QueryTile / kV5Warps;
inline constexpr int kV5Stride = kMaxHeadDim + 1;
inline constexpr size_t v5_shared_bytes() {
  return 4 * (2 * size_t{kV5KeyTile} * kV5Stride + 2 * size_t{kV5QueryTile} * kMaxHeadDim +
              2 * size_t{kV5QueryTile} * kV5KeyTile);
}
inline int64_t v5_blocks(int64_t batch_heads, int64_t s) {
  return batch_heads * ceil_div(s, kV5KeyTile);
}

// The workspace every version shares: v1's L x S matrix (scores, then P), v3's running max and
// sum of each query row, the backward's delta = rowsum(dO * O).
inline size_t workspace_bytes(int64_t batch_heads, int64_t l, int64_t s) {
  const size_t scores = static_cast<size_t>(batch_heads * l * s);
  const size_t rows = static_cast<size_t>(batch_heads * l);
  return 4 * std::max({scores, 2 * rows, size_t{64}});
}
// The part of it every version but v1 uses: two floats a query row.
inline size_t row_workspace_bytes(int64_t batch_heads, int64_t l) {
  return 4 * std::max(2 * static_cast<size_t>(batch_heads * l), size_t{64});
}
inline float* v3_running_max(void* workspace) {
  return static_cast<float*>(workspace);
}
inline float* v3_running_sum(void* workspace, int64_t batch_heads, int64_t l) {
  return static_cast<float*>(workspace) + batch_heads * l;
}

// Pairs (query, key) that take part: L S, or with the mask the keys each query attends.
inline double attended_pairs(int64_t l, int64_t s, bool causal) {
  if (!causal) return static_cast<double>(l) * static_cast<double>(s);
  const int64_t full = std::min(l, s);  // queries 0..full-1 attend l + 1 keys each
  return static_cast<double>(full) * static_cast<double>(full + 1) / 2 +
         static_cast<double>(l - full) * static_cast<double>(s);
}
// FLOPs of the forward: 2 D for each score and 2 D for its share of P V, per attended pair.
inline double forward_flops(int64_t batch_heads, int64_t l, int64_t s, int64_t d, bool causal) {
  return 4.0 * static_cast<double>(batch_heads) * static_cast<double>(d) *
         attended_pairs(l, s, causal);
}
// The backward: the score again, dV, dP, dK and dQ: 5 products of 2 D a pair.
inline double backward_flops(int64_t batch_heads, int64_t l, int64_t s, int64_t d, bool causal) {
  return 10.0 * static_cast<double>(batch_heads) * static_cast<double>(d) *
         attended_pairs(l, s, causal);
}
// The least a forward moves: Q, K, V read once (in_bytes an element), O written once in f32 and
// lse; the backward reads Q, K, V, O, dO, lse and writes dQ, dK, dV, all f32.
inline double forward_bytes(int64_t batch_heads, int64_t l, int64_t s, int64_t d, int in_bytes) {
  const double bh = static_cast<double>(batch_heads);
  return bh * (static_cast<double>(in_bytes) * static_cast<double>(d) * (l + 2 * s) +
               4.0 * static_cast<double>(l) * (d + 1));
}
inline double backward_bytes(int64_t batch_heads, int64_t l, int64_t s, int64_t d) {
  const double bh = static_cast<double>(batch_heads);
  return 4.0 * bh *
         (static_cast<double>(d) * static_cast<double>(4 * l + 4 * s) + static_cast<double>(l));
}

}  // namespace kiln::lab::attention
