// The tensor-core GEMM lab's table (versions.h): version 0 first, each later one adding one idea.
#include <vector>

#include "kiln/kernels/cuda/lab/gemm_tc/versions.h"

namespace kiln::lab {

const std::vector<GemmTcVersion>& gemm_tc_versions() {
  static const std::vector<GemmTcVersion> versions = {
#ifdef KILN_CUDA_SIM
      // The CUDA simulator runs no library (kernels/cuda/simulator/lab_library_versions.cpp): the
      // CPU reference stands in for cuBLASLt. v1 and v2 run on its emulation of mma.sync, ldmatrix
      // and cp.async (sim/ptx.h).
      {"v0_cpu_reference", "simulator: the CPU reference in place of cuBLASLt",
       gemm_tc::v0_cublaslt},
#else
      {"v0_cublaslt", "cuBLASLt cublasLtMatmul, f32 accumulation (the library)",
       gemm_tc::v0_cublaslt},
#endif
      {"v1_mma_ldmatrix", "mma.sync.m16n8k16 fed by ldmatrix from padded shared memory",
       gemm_tc::v1_mma_ldmatrix},
      {"v2_cp_async_pipeline", "a 4-stage cp.async pipeline: loads overlap the tensor cores",
       gemm_tc::v2_cp_async_pipeline},
  };
  return versions;
}

}  // namespace kiln::lab
