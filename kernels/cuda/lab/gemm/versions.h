// The f32 GEMM lab (docs/kernels/gemm.md): C = A . B, row-major f32, no tensor cores (no TF32),
// siboehm/SGEMM_CUDA's progression in kiln's own code. Any m, n, k: every version bounds-checks
// its tiles' edges.
//
//   v0_cublas               cuBLAS: cublasGemmEx with CUBLAS_COMPUTE_32F (FFMA, not TF32)
//   v1_naive                a thread per element of C, consecutive threads down a column
//   v2_coalesced            consecutive threads along a row: coalesced loads of B and stores of C
//   v3_shared_tiling        32 x 32 tiles of A and B staged in shared memory
//   v4_blocktiling_1d       a thread computes 8 elements of a column: fewer shared loads a FMA
//   v5_blocktiling_2d       a thread computes 8 x 8: an outer product from registers
//   v6_vectorized           float4 global and shared loads, A's tile stored transposed
//   v7_warptiling           a warp owns a 64 x 64 piece: warp-level locality in shared reads
//   v8_double_buffering     the next tile's loads overlap the current tile's math
//
// Bench: kiln-bench lab gemm --m 4096 --n 4096 --k 4096.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/kernels/cuda/lab/lab.h"

namespace kiln::lab {

struct GemmArgs {
  const float* a = nullptr;  // [m, k] on the GPU
  const float* b = nullptr;  // [k, n]
  float* c = nullptr;        // [m, n], overwritten
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};

using GemmVersion = LabVersion<GemmArgs>;

// Version 0 first. Defined in CUDA builds only.
const std::vector<GemmVersion>& gemm_versions();

namespace gemm {
void v0_cublas(const GemmArgs& args);
void v1_naive(const GemmArgs& args);
void v2_coalesced(const GemmArgs& args);
void v3_shared_tiling(const GemmArgs& args);
void v4_blocktiling_1d(const GemmArgs& args);
void v5_blocktiling_2d(const GemmArgs& args);
void v6_vectorized(const GemmArgs& args);
void v7_warptiling(const GemmArgs& args);
void v8_double_buffering(const GemmArgs& args);
}  // namespace gemm

}  // namespace kiln::lab
