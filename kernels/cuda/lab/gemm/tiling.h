// The f32 GEMM lab's host-side arithmetic (kernels/cuda/lab/gemm/): each version's tile
// parameters, the constraints between them, its block, grid and shared memory. Plain C++: the
// kernels take these constants as template arguments (and static_assert valid()), and
// tests/test_lab_tiling.cpp checks the same arithmetic on the CPU.
//
// C [m, n] = A [m, k] . B [k, n], all row-major. A block computes a bm x bn tile of C, stepping
// through k bk at a time; a thread computes tm x tn elements of it (v4-v8), and in v7 and v8 a
// warp owns a wm x wn piece of the block's tile, walked in wn_iter sub-tiles along n (and as many
// along m as it takes to give each lane tm x tn of each).
#pragma once

#include <cstdint>

#include "kiln/kernels/cuda/lab/lab.h"

namespace kiln::lab::gemm {

inline constexpr int kWarpSize = 32;
inline constexpr int kStaticSharedBytes = 48 * 1024;  // without cudaFuncSetAttribute
inline constexpr int64_t kMaxGridY = 65535;
// The largest bm, bn and bk a tiling may have: problem.h keeps m, n and k this far below 2^31 - 1,
// so the kernels' int indices, which run up to a tile past the problem's edge, never wrap.
inline constexpr int kMaxTile = 128;

struct Tiling {
  int bm = 0, bn = 0, bk = 0;  // the block's tile of C, and its step along k
  int tm = 1, tn = 1;          // elements of C a thread computes in each of its sub-tiles
  int wm = 0, wn = 0;          // v7, v8: a warp's tile (0: no warp tiling)
  int wn_iter = 1;             // v7, v8: the warp's sub-tiles along n
  int threads = 0;
  int stages = 1;       // shared-memory copies of the A and B tiles (2: double buffering)
  bool vector = false;  // float4 loads (A's tile stored transposed), v6-v8
};

inline constexpr Tiling kV1Naive{.bm = 32, .bn = 32, .bk = 0, .threads = 1024};
inline constexpr Tiling kV2Coalesced{.bm = 32, .bn = 32, .bk = 0, .threads = 1024};
inline constexpr Tiling kV3SharedTiling{.bm = 32, .bn = 32, .bk = 32, .threads = 1024};
inline constexpr Tiling kV4Blocktiling1d{.bm = 64, .bn = 64, .bk = 8, .tm = 8, .threads = 512};
inline constexpr Tiling kV5Blocktiling2d{
    .bm = 128, .bn = 128, .bk = 8, .tm = 8, .tn = 8, .threads = 256};
inline constexpr Tiling kV6Vectorized{
    .bm = 128, .bn = 128, .bk = 8, .tm = 8, .tn = 8, .threads = 256, .vector = true};
inline constexpr Tiling kV7Warptiling{.bm = 128,
                                      .bn = 128,
                                      .bk = 16,
                                      .tm = 8,
                                      .tn = 4,
                                      .wm = 64,
                                      .wn = 64,
                                      .wn_iter = 4,
                                      .threads = 128,
                                      .vector = true};
inline constexpr Tiling kV8DoubleBuffering{.bm = 128,
                                           .bn = 128,
                                           .bk = 16,
                                           .tm = 8,
                                           .tn = 4,
                                           .wm = 64,
                                           .wn = 64,
                                           .wn_iter = 4,
                                           .threads = 128,
                                           .stages = 2,
                                           .vector = true};

// v7, v8: the warp's sub-tiles along m, and each sub-tile's size.
inline constexpr int wm_iter(const Tiling& t) {
  return t.wm * t.wn / (kWarpSize * t.tm * t.tn * t.wn_iter);
}
inline constexpr int wsub_m(const Tiling& t) {
  return t.wm / wm_iter(t);
}
inline constexpr int wsub_n(const Tiling& t) {
  return t.wn / t.wn_iter;
}

// Floats (or float4s, for vector tilings) of the A and B tiles each thread loads per k step.
inline constexpr int a_loads_per_thread(const Tiling& t) {
  return t.bm * t.bk / (t.vector ? 4 : 1) / t.threads;
}
inline constexpr int b_loads_per_thread(const Tiling& t) {
  return t.bk * t.bn / (t.vector ? 4 : 1) / t.threads;
}

inline constexpr int shared_bytes(const Tiling& t) {
  return t.stages * (t.bm * t.bk + t.bk * t.bn) * static_cast<int>(sizeof(float));
}

// Every constraint a version's kernel relies on. Each returns false where the kernel would be
// wrong (a thread left without work or with an element twice, a tile half loaded) or would not
// launch.
inline constexpr bool valid(const Tiling& t) {
  if (t.threads <= 0 || t.threads > 1024 || t.threads % kWarpSize != 0) return false;
  if (t.bm <= 0 || t.bn <= 0 || t.bk < 0 || t.tm <= 0 || t.tn <= 0) return false;
  if (t.bm > kMaxTile || t.bn > kMaxTile || t.bk > kMaxTile) return false;
  if (t.bm % t.tm != 0 || t.bn % t.tn != 0) return false;
  if (shared_bytes(t) > kStaticSharedBytes) return false;
  if (t.bk == 0) return t.bm * t.bn == t.threads;  // v1, v2: a thread per element of the tile
  const int vector = t.vector ? 4 : 1;
  if (t.bk % vector != 0 || t.bn % vector != 0) return false;
  // Loads spread evenly: every thread loads the same number of floats (or float4s).
  if ((t.bm * t.bk / vector) % t.threads != 0 || (t.bk * t.bn / vector) % t.threads != 0)
    return false;
  if (t.vector && (t.tm % 4 != 0 || t.tn % 4 != 0)) return false;  // float4 reads of registers
  if (t.wm == 0) return (t.bm / t.tm) * (t.bn / t.tn) == t.threads;
  // Warp tiling: the warps cover the block's tile, and the lanes each warp sub-tile.
  if (t.bm % t.wm != 0 || t.bn % t.wn != 0) return false;
  if ((t.bm / t.wm) * (t.bn / t.wn) * kWarpSize != t.threads) return false;
  if (t.wn % t.wn_iter != 0 || wm_iter(t) <= 0) return false;
  if (t.wm * t.wn != wm_iter(t) * kWarpSize * t.tm * t.tn * t.wn_iter) return false;
  if (t.wm % wm_iter(t) != 0 || wsub_m(t) % t.tm != 0 || wsub_n(t) % t.tn != 0) return false;
  return (wsub_m(t) / t.tm) * (wsub_n(t) / t.tn) == kWarpSize;
}

// Where a thread's elements of C lie in the block's tile (v4-v8): its first row and column, then
// row0 + wi * wsub_m + i and col0 + wj * wsub_n + j for wi < wm_iter, i < tm, wj < wn_iter,
// j < tn (one sub-tile, wm_iter = wn_iter = 1, without warp tiling). Consecutive threads take
// consecutive columns, so a warp's stores of C run along rows.
struct Origin {
  int row = 0;
  int col = 0;
};

template <Tiling kT>
KILN_HOST_DEVICE constexpr Origin thread_origin(int tid) {
  if constexpr (kT.wm == 0) {
    return {tid / (kT.bn / kT.tn) * kT.tm, tid % (kT.bn / kT.tn) * kT.tn};
  } else {
    const int warp = tid / kWarpSize, lane = tid % kWarpSize;
    constexpr int kLanesAlongN = kT.wn / kT.wn_iter / kT.tn;  // wsub_n / tn
    return {warp / (kT.bn / kT.wn) * kT.wm + lane / kLanesAlongN * kT.tm,
            warp % (kT.bn / kT.wn) * kT.wn + lane % kLanesAlongN * kT.tn};
  }
}

struct Grid {
  unsigned x = 1, y = 1;
};

// v1 maps blockIdx.x (and threadIdx.x) to rows of C; v2-v8 map x to columns, so that consecutive
// threads write consecutive elements.
inline Grid v1_grid(int64_t m, int64_t n) {
  return {static_cast<unsigned>((m + 31) / 32), static_cast<unsigned>((n + 31) / 32)};
}
inline Grid grid(const Tiling& t, int64_t m, int64_t n) {
  return {static_cast<unsigned>((n + t.bn - 1) / t.bn),
          static_cast<unsigned>((m + t.bm - 1) / t.bm)};
}
// Whether a grid launches: gridDim.y is at most 65535 (gridDim.x's 2^31 - 1 is never reached
// first here).
inline bool fits(const Grid& g) {
  return g.y <= kMaxGridY;
}

// 2 m n k: one multiply and one add for each term.
inline double flops(int64_t m, int64_t n, int64_t k) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}
// The least a GEMM moves: A and B read once, C written once.
inline double bytes_moved(int64_t m, int64_t n, int64_t k, double input_bytes,
                          double output_bytes) {
  return input_bytes * static_cast<double>(m * k + k * n) +
         output_bytes * static_cast<double>(m * n);
}

}  // namespace kiln::lab::gemm
