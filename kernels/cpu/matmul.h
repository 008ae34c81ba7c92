// CPU matrix products through Eigen: a BLAS-style gemm on raw row-major buffers (what conv2d
// builds on) and a batched product on strided tensors. Eigen stays inside matmul.cpp.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::cpu {

// c[m, n] = op(a) op(b), or c += op(a) op(b) when accumulate; op(a) is [m, k]. Each buffer is
// row-major with leading dimension ld*; a transposed operand is read as the transpose of what is
// stored (a trans_a buffer holds [k, m]). T is float or double. Eigen may use OpenMP threads
// inside; it stays on one thread when called from a parallel region.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
          const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate);

extern template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                                 const float*, int64_t, float*, int64_t, bool);
extern template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                                  const double*, int64_t, double*, int64_t, bool);

// out[i] = a[i] b[i] (or += when accumulate) for every batch index i: a is [..., n, k], b is
// [..., k, m], both with out's batch dims (batch strides may be 0, as after expand), out is a
// contiguous [..., n, m]; all f32 or all f64. Each matrix of a and b must be row- or
// column-major (as_gemm_operand makes it so).
void batched_matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate = false);

// t itself when each of its matrices (last two dims) is row- or column-major, else a contiguous
// copy: transposed views reach Eigen without a copy.
Tensor as_gemm_operand(const Tensor& t);

}  // namespace kiln::cpu
