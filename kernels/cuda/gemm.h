// The GPU's BLAS-style gemm on raw row-major device buffers, through cuBLAS (defined in
// matmul.cpp): what batched_matmul builds on, and what tests hold against cpu::gemm. f32 and f64
// compute in their own precision (f32 in TF32 only when backends::cuda_matmul_allow_tf32()); f16
// and bf16 multiply with f32 accumulation and round once, as the CPU does through f32.
#pragma once

#include <cstdint>

#include "kiln/core/half.h"

namespace kiln::cuda {

// c[m, n] = op(a) op(b), or c += op(a) op(b) when accumulate, as cpu::gemm, on buffers of the
// current device, on the current stream. T is float, double, Half or BFloat16.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
          const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate);

extern template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                                 const float*, int64_t, float*, int64_t, bool);
extern template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                                  const double*, int64_t, double*, int64_t, bool);
extern template void gemm<Half>(bool, bool, int64_t, int64_t, int64_t, const Half*, int64_t,
                                const Half*, int64_t, Half*, int64_t, bool);
extern template void gemm<BFloat16>(bool, bool, int64_t, int64_t, int64_t, const BFloat16*, int64_t,
                                    const BFloat16*, int64_t, BFloat16*, int64_t, bool);

}  // namespace kiln::cuda
