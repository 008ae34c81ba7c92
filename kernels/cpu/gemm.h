// The CPU's BLAS-style gemm on raw row-major buffers (defined in matmul.cpp): f32 through oneDNN's
// sgemm where the build has oneDNN and it is on, else (and f64) through Eigen. What batched_matmul,
// conv2d's im2col path and the fused attention's tiles build on.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// c[m, n] = op(a) op(b), or c += op(a) op(b) when accumulate; op(a) is [m, k]. Each buffer is
// row-major with leading dimension ld*; a transposed operand is read as the transpose of what is
// stored (a trans_a buffer holds [k, m]). T is float or double. oneDNN and Eigen may use OpenMP
// threads inside; both stay on one thread when called from a parallel region.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
          const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate);

extern template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                                 const float*, int64_t, float*, int64_t, bool);
extern template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                                  const double*, int64_t, double*, int64_t, bool);

}  // namespace kiln::cpu
