// The vectorised tile loads of v6-v8 (v6_vectorized.cu explains them): a thread fetches its share
// of the next A and B tiles from global memory into registers as float4s, then commits them to
// shared memory, A's tile transposed to [bk][bm] so that the inner loop reads a column of it as
// consecutive floats. Fetch and commit are apart so that v8 can overlap them with math.
//
// kVector: k and n are multiples of 4 and A and B start on 16 bytes, so a float4 of a row is
// wholly inside the matrix or wholly outside; otherwise each of the four floats is loaded (or
// zeroed) alone. Past an edge the tile holds zeros, which add nothing.
#pragma once

#include <cstdint>

#include "kiln/kernels/cuda/lab/gemm/tiling.h"

namespace kiln::lab::gemm {

template <Tiling kT, bool kVector>
struct TileLoader {
  static_assert(kT.vector && valid(kT));
  static constexpr int kALoads = a_loads_per_thread(kT);
  static constexpr int kBLoads = b_loads_per_thread(kT);
  float a[kALoads][4];
  float b[kBLoads][4];

  // The tiles at A [block_row.., t..] and B [t.., block_col..].
  __device__ __forceinline__ void fetch(const float* __restrict__ A, const float* __restrict__ B,
                                        int m, int n, int k, int block_row, int block_col, int t) {
#pragma unroll
    for (int l = 0; l < kALoads; ++l) {
      const int i = threadIdx.x + l * kT.threads;
      const int row = block_row + i / (kT.bk / 4), p = t + i % (kT.bk / 4) * 4;
      load4(A, row < m, int64_t{row} * k + p, k - p, a[l]);
    }
#pragma unroll
    for (int l = 0; l < kBLoads; ++l) {
      const int i = threadIdx.x + l * kT.threads;
      const int p = t + i / (kT.bn / 4), col = block_col + i % (kT.bn / 4) * 4;
      load4(B, p < k, int64_t{p} * n + col, n - col, b[l]);
    }
  }

  // a_tile [bk][bm] (A's tile transposed), b_tile [bk][bn]; both 16-byte aligned.
  __device__ __forceinline__ void commit(float* a_tile, float* b_tile) const {
#pragma unroll
    for (int l = 0; l < kALoads; ++l) {
      const int i = threadIdx.x + l * kT.threads;
      const int row = i / (kT.bk / 4), p = i % (kT.bk / 4) * 4;
#pragma unroll
      for (int j = 0; j < 4; ++j) a_tile[(p + j) * kT.bm + row] = a[l][j];
    }
#pragma unroll
    for (int l = 0; l < kBLoads; ++l) {
      const int i = threadIdx.x + l * kT.threads;
      const int p = i / (kT.bn / 4), col = i % (kT.bn / 4) * 4;
      *reinterpret_cast<float4*>(&b_tile[p * kT.bn + col]) =
          make_float4(b[l][0], b[l][1], b[l][2], b[l][3]);
    }
  }

 private:
  // Four consecutive floats of a row at src[offset], of which `left` (may be <= 0) are inside
  // the row; none if !row_inside.
  __device__ __forceinline__ static void load4(const float* __restrict__ src, bool row_inside,
                                               int64_t offset, int left, float (&v)[4]) {
    if constexpr (kVector) {
      float4 q = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (row_inside && left > 0) q = *reinterpret_cast<const float4*>(src + offset);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = row_inside && j < left ? src[offset + j] : 0.0f;
    }
  }
};

// v[at .. at + 3] = p[0 .. 3], one 16-byte shared-memory load (p 16-byte aligned).
template <int kSize>
__device__ __forceinline__ void read4(const float* p, float (&v)[kSize], int at) {
  const float4 q = *reinterpret_cast<const float4*>(p);
  v[at] = q.x, v[at + 1] = q.y, v[at + 2] = q.z, v[at + 3] = q.w;
}

// Whether a problem may take the float4 paths (TileLoader<.., true>, float4 stores of C).
inline bool vector_aligned(const void* a, const void* b, const void* c, int64_t n, int64_t k) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return n % 4 == 0 && k % 4 == 0 && aligned(a) && aligned(b) && aligned(c);
}

// Stores four consecutive elements of a row of C at c[offset], `left` of them inside the row.
template <bool kVector>
__device__ __forceinline__ void store4(float* __restrict__ c, int64_t offset, int left,
                                       const float (&v)[4]) {
  if constexpr (kVector) {
    if (left > 0) *reinterpret_cast<float4*>(c + offset) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (j < left) c[offset + j] = v[j];
  }
}

}  // namespace kiln::lab::gemm
