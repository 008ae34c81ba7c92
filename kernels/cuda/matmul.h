// GPU matrix products through cuBLAS, the twins of kernels/cpu/matmul.h: a BLAS-style gemm on raw
// row-major device buffers and a batched product on strided tensors. f32 and f64 compute in their
// own precision (f32 in TF32 only when backends::cuda_matmul_allow_tf32()); f16 and bf16 multiply
// with f32 accumulation and round once, as the CPU does through f32.
#pragma once

#include <cstdint>

#include "kiln/core/half.h"
#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA

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

// out[i] = a[i] b[i] (or += when accumulate) for every batch index i, as cpu::batched_matmul: a is
// [..., n, k], b is [..., k, m] with out's batch dims (batch strides may be 0), out a contiguous
// [..., n, m]; all of one dtype among f32, f64, f16, bf16, all on out's device. Batch dims that
// fold into one stride go to cuBLAS as one strided-batched call.
void batched_matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate = false);

// t itself when each of its matrices (last two dims) is row- or column-major, else a contiguous
// copy, as cpu::as_gemm_operand.
Tensor as_gemm_operand(const Tensor& t);

#else

template <class T>
[[noreturn]] void gemm(bool, bool, int64_t, int64_t, int64_t, const T*, int64_t, const T*, int64_t,
                       T*, int64_t, bool) {
  not_built("gemm");
}
[[noreturn]] inline void batched_matmul(const Tensor&, const Tensor&, const Tensor&, bool = false) {
  not_built("batched_matmul");
}
[[noreturn]] inline Tensor as_gemm_operand(const Tensor&) {
  not_built("as_gemm_operand");
}

#endif

}  // namespace kiln::gpu
