// GEMM v0: cuBLAS, the correctness reference and the speed baseline. cublasGemmEx with f32 in
// and out and CUBLAS_COMPUTE_32F, which keeps cuBLAS on FFMA (CUBLAS_COMPUTE_32F_FAST_TF32 would
// allow TF32 tensor cores, a different contest), on kiln's per-thread handle (handles.h), whose
// math mode is the default.
//
// cuBLAS is column-major; a row-major [m, n] matrix is the column-major [n, m] of its transpose,
// so C = A . B row-major is C^T = B^T . A^T column-major: B comes first, and m and n swap.
//
// measured: not yet on a GPU.
#include <cublas_v2.h>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/handles.h"
#include "kiln/kernels/cuda/lab/gemm/versions.h"

namespace kiln::lab::gemm {

void v0_cublas(const GemmArgs& args) {
  if (args.m == 0 || args.n == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  cublasHandle_t handle = cuda::cublas_handle(cuda::current_device());
  KILN_CUBLAS_CHECK(cublasGemmEx_64(handle, CUBLAS_OP_N, CUBLAS_OP_N, args.n, args.m, args.k,
                                    &alpha, args.b, CUDA_R_32F, args.n, args.a, CUDA_R_32F, args.k,
                                    &beta, args.c, CUDA_R_32F, args.n, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
}

}  // namespace kiln::lab::gemm
