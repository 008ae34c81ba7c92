// The kernel lab's library versions in the CUDA simulator (KILN_CUDA=SIM, docs/simulator.md):
// cuBLAS, cuBLASLt and CUB are not simulated, so each family's version 0 runs kiln's CPU code on
// the simulated device memory (host memory) instead: each family's CPU reference (reference.h,
// double accumulation). The tables (versions.cu) name them so. The other versions, kiln's own
// kernels, are checked against them. Replaces v0_cublas.cu, v0_cublaslt.cu and v0_cub.cu in this
// build only (CMakeLists.txt).
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kiln/core/dtype.h"
#include "kiln/core/half.h"
#include "kiln/kernels/cuda/lab/gemm/reference.h"
#include "kiln/kernels/cuda/lab/gemm/versions.h"
#include "kiln/kernels/cuda/lab/gemm_tc/versions.h"
#include "kiln/kernels/cuda/lab/reduction/reference.h"
#include "kiln/kernels/cuda/lab/reduction/tiling.h"
#include "kiln/kernels/cuda/lab/reduction/versions.h"

namespace kiln::lab {

void gemm::v0_cublas(const GemmArgs& args) {
  gemm::gemm_reference(args.a, args.b, args.c, args.m, args.n, args.k);
}

void gemm_tc::v0_cublaslt(const GemmTcArgs& args) {
  if (args.dtype == DType::f16)
    gemm::gemm_reference(static_cast<const Half*>(args.a), static_cast<const Half*>(args.b), args.c,
                         args.m, args.n, args.k);
  else
    gemm::gemm_reference(static_cast<const BFloat16*>(args.a), static_cast<const BFloat16*>(args.b),
                         args.c, args.m, args.n, args.k);
}

void reduction::v0_cub(const ReductionArgs& args) {
  row_sums_reference(args.x, args.out, args.rows, args.cols);
}

size_t reduction_workspace_bytes(int64_t rows, int64_t cols) {
  return std::max<size_t>(1, reduction::workspace_layout(rows, cols).bytes);
}

}  // namespace kiln::lab
