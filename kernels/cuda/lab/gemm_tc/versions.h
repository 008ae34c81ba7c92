// The tensor-core GEMM lab (docs/kernels/gemm_tc.md): C = A . B with A and B in bf16 or f16 and C
// in f32, accumulated in f32, row-major.
//
//   v0_cublaslt            cuBLASLt: cublasLtMatmul, CUBLAS_COMPUTE_32F, its heuristic's first
//                          algorithm
//   v1_mma_ldmatrix        mma.sync.m16n8k16 (Ampere's warp-level tensor-core instruction),
//                          fragments loaded from padded shared memory with ldmatrix
//   v2_cp_async_pipeline   v1 with a 4-stage cp.async pipeline: the tiles of the next 3 steps in
//                          flight while the tensor cores work on this one
//
// Hopper's wgmma with TMA loads (sm_90a) is not here yet: docs/kernels/gemm_tc.md says why.
// Bench: kiln-bench lab gemm_tc --m 8192 --n 8192 --k 8192 --dtype bf16.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/kernels/cuda/lab/lab.h"

namespace kiln::lab {

struct GemmTcArgs {
  const void* a = nullptr;  // [m, k] of `dtype` on the GPU
  const void* b = nullptr;  // [k, n] of `dtype`
  float* c = nullptr;       // [m, n], overwritten
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  DType dtype = DType::bf16;  // bf16 or f16
};

using GemmTcVersion = LabVersion<GemmTcArgs>;

// Version 0 first. Defined in CUDA builds only.
const std::vector<GemmTcVersion>& gemm_tc_versions();

namespace gemm_tc {
void v0_cublaslt(const GemmTcArgs& args);
void v1_mma_ldmatrix(const GemmTcArgs& args);
void v2_cp_async_pipeline(const GemmTcArgs& args);
}  // namespace gemm_tc

}  // namespace kiln::lab
