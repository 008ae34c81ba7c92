// The tensor-core GEMM lab's host-side arithmetic (kernels/cuda/lab/gemm_tc/): tile parameters,
// their constraints, shared-memory layout and grid. Plain C++, checked on the CPU by
// tests/test_lab_tiling.cpp; the kernels take the constants as template arguments.
//
// C [m, n] (f32) = A [m, k] . B [k, n] (bf16 or f16), row-major. A block computes a bm x bn
// tile of C in steps of bk along k; its warps form a warps_m x warps_n grid, each owning a
// (bm / warps_m) x (bn / warps_n) piece, computed as 16 x 8 tiles of mma.sync.m16n8k16.
#pragma once

#include <cstdint>

#include "kiln/kernels/cuda/lab/lab.h"

namespace kiln::lab::gemm_tc {

inline constexpr int kWarpSize = 32;
inline constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;  // mma.sync.aligned.m16n8k16
inline constexpr int kChunkElements = 8;                 // 16-byte copies: 8 bf16 or f16
inline constexpr int kStaticSharedBytes = 48 * 1024;
// The most dynamic shared memory a block may opt into on every architecture the lab's peaks know
// (lab_gpu.cpp's kArchRates): 99 KiB on sm_86 and sm_89, 163 on sm_80, 227 on sm_90. The
// smallest, so valid() never accepts a stage count that launches on an H100 and not on an A100.
inline constexpr int kMaxSharedBytes = 99 * 1024;
inline constexpr int64_t kMaxGridY = 65535;
// The largest bm, bn and bk a tiling may have: problem.h keeps m, n and k this far below 2^31 - 1,
// so the kernels' int indices, which run up to a tile past the problem's edge, never wrap.
inline constexpr int kMaxTile = 128;

struct TcTiling {
  int bm = 0, bn = 0, bk = 0;
  int warps_m = 0, warps_n = 0;
  int stages = 1;  // shared-memory copies of the tiles: 1 (v1), a cp.async pipeline (v2)
  // Elements added to each shared row: a row of 32 bf16 is 64 bytes, so the 8 rows an ldmatrix
  // reads would start on 2 banks only; 8 more (16 bytes) make the stride an odd number of
  // 16-byte units, and the 8 rows land on disjoint groups of 4 banks.
  int pad = 8;
};

inline constexpr TcTiling kV1MmaLdmatrix{
    .bm = 128, .bn = 128, .bk = 32, .warps_m = 2, .warps_n = 4, .stages = 1};
inline constexpr TcTiling kV2CpAsyncPipeline{
    .bm = 128, .bn = 128, .bk = 32, .warps_m = 2, .warps_n = 4, .stages = 4};

inline constexpr int threads(const TcTiling& t) {
  return t.warps_m * t.warps_n * kWarpSize;
}
inline constexpr int warp_m(const TcTiling& t) {
  return t.bm / t.warps_m;
}
inline constexpr int warp_n(const TcTiling& t) {
  return t.bn / t.warps_n;
}
inline constexpr int mma_tiles_m(const TcTiling& t) {
  return warp_m(t) / kMmaM;
}
inline constexpr int mma_tiles_n(const TcTiling& t) {
  return warp_n(t) / kMmaN;
}
// Shared rows, in elements: A's tile [bm][bk + pad], B's [bk][bn + pad].
inline constexpr int a_stride(const TcTiling& t) {
  return t.bk + t.pad;
}
inline constexpr int b_stride(const TcTiling& t) {
  return t.bn + t.pad;
}
inline constexpr int stage_elements(const TcTiling& t) {
  return t.bm * a_stride(t) + t.bk * b_stride(t);
}
inline constexpr int shared_bytes(const TcTiling& t) {
  return t.stages * stage_elements(t) * 2;
}
// 16-byte copies of a stage a thread makes, for A and for B.
inline constexpr int a_chunks_per_thread(const TcTiling& t) {
  return t.bm * t.bk / kChunkElements / threads(t);
}
inline constexpr int b_chunks_per_thread(const TcTiling& t) {
  return t.bk * t.bn / kChunkElements / threads(t);
}

// ldmatrix reads 8 rows of 16 bytes at once; they hit 8 disjoint groups of 4 banks when the row
// stride is an odd number of 16-byte units.
inline constexpr bool ldmatrix_conflict_free(int stride_elements) {
  return stride_elements * 2 % 16 == 0 && (stride_elements * 2 / 16) % 2 == 1;
}

inline constexpr bool valid(const TcTiling& t) {
  if (t.bm <= 0 || t.bn <= 0 || t.bk <= 0 || t.warps_m <= 0 || t.warps_n <= 0) return false;
  if (t.bm > kMaxTile || t.bn > kMaxTile || t.bk > kMaxTile) return false;
  if (threads(t) > 1024 || t.stages < 1) return false;
  if (t.bm % t.warps_m != 0 || t.bn % t.warps_n != 0) return false;
  if (warp_m(t) % kMmaM != 0 || t.bk % kMmaK != 0) return false;
  // B's fragments come two n8 tiles at a time (one ldmatrix.x4.trans).
  if (warp_n(t) % (2 * kMmaN) != 0) return false;
  if (t.bk % kChunkElements != 0 || t.bn % kChunkElements != 0) return false;
  if ((t.bm * t.bk / kChunkElements) % threads(t) != 0) return false;
  if ((t.bk * t.bn / kChunkElements) % threads(t) != 0) return false;
  if (!ldmatrix_conflict_free(a_stride(t)) || !ldmatrix_conflict_free(b_stride(t))) return false;
  const int limit = t.stages == 1 ? kStaticSharedBytes : kMaxSharedBytes;
  return shared_bytes(t) <= limit;
}

// Where accumulator r (0-3) of mma tile (i, j) of lane `lane` in warp `warp` sits in the block's
// tile of C: the fragment layout of mma.m16n8k16 (mma.cuh) puts r = 0, 1 at row g, columns 2t and
// 2t + 1, and r = 2, 3 at row g + 8, with g = lane / 4 and t = lane % 4; the warps form a
// warps_m x warps_n grid of warp_m x warp_n pieces.
struct Position {
  int row = 0;
  int col = 0;
};

template <TcTiling kT>
KILN_HOST_DEVICE constexpr Position accumulator_position(int warp, int lane, int i, int j, int r) {
  constexpr int kWarpM = kT.bm / kT.warps_m, kWarpN = kT.bn / kT.warps_n;  // warp_m, warp_n
  return {warp / kT.warps_n * kWarpM + i * kMmaM + lane / 4 + r / 2 * 8,
          warp % kT.warps_n * kWarpN + j * kMmaN + lane % 4 * 2 + r % 2};
}

struct Grid {
  unsigned x = 1, y = 1;
};
inline Grid grid(const TcTiling& t, int64_t m, int64_t n) {
  return {static_cast<unsigned>((n + t.bn - 1) / t.bn),
          static_cast<unsigned>((m + t.bm - 1) / t.bm)};
}
inline bool fits(const Grid& g) {
  return g.y <= kMaxGridY;
}

// The hand-written versions copy 16-byte pieces of rows: n and k multiples of 8.
inline bool supported(int64_t n, int64_t k) {
  return n % kChunkElements == 0 && k % kChunkElements == 0;
}

}  // namespace kiln::lab::gemm_tc
