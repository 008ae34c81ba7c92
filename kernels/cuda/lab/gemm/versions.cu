// The f32 GEMM lab's table (versions.h): version 0 first, each later one adding one idea.
#include <vector>

#include "kiln/kernels/cuda/lab/gemm/versions.h"

namespace kiln::lab {

const std::vector<GemmVersion>& gemm_versions() {
  static const std::vector<GemmVersion> versions = {
#ifdef KILN_CUDA_SIM
      // The CUDA simulator runs no library (kernels/cuda/simulator/lab_library_versions.cpp).
      {"v0_cpu_reference", "simulator: the CPU reference in place of cuBLAS", gemm::v0_cublas},
#else
      {"v0_cublas", "cuBLAS cublasGemmEx, CUBLAS_COMPUTE_32F (no TF32)", gemm::v0_cublas},
#endif
      {"v1_naive", "a thread per element of C, warps down a column", gemm::v1_naive},
      {"v2_coalesced", "warps along a row: coalesced loads and stores", gemm::v2_coalesced},
      {"v3_shared_tiling", "32 x 32 tiles of A and B in shared memory", gemm::v3_shared_tiling},
      {"v4_blocktiling_1d", "8 results a thread down a column", gemm::v4_blocktiling_1d},
      {"v5_blocktiling_2d", "8 x 8 results a thread: outer products in registers",
       gemm::v5_blocktiling_2d},
      {"v6_vectorized", "float4 loads, A's tile transposed", gemm::v6_vectorized},
      {"v7_warptiling", "a warp owns 64 x 64 of the tile", gemm::v7_warptiling},
      {"v8_double_buffering", "the next tile's loads overlap this tile's FMAs",
       gemm::v8_double_buffering},
  };
  return versions;
}

}  // namespace kiln::lab
