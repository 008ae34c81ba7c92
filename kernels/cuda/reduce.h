// CUDA sum and mean: the twins of kernels/cpu/reduce.h, plus sum_reduce, which reduces any dims of
// a strided tensor in place of reduced_last_2d + sum_rows (no permuted copy; reducing the last
// dims and reducing outer dims over a contiguous inner one both read memory coalesced).
// Accumulation: f32 for f32/f16/bf16, f64 for f64, i64 for integers and bool (the CPU sums
// floating types in double, so f32 results differ from it by rounding only).
#pragma once

#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA
Tensor reduced_last_2d(const Tensor& x, const std::vector<bool>& reduced);
void sum_rows(const Tensor& x2d, const Tensor& out, bool mean);
// out (contiguous, the kept dims' elements in row-major order, of x's dtype or i64) = the sum (or
// mean) of x over the dims where reduced[d] is true. An empty reduction gives 0 (mean: nan).
void sum_reduce(const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, bool mean);
#else
[[noreturn]] inline Tensor reduced_last_2d(const Tensor&, const std::vector<bool>&) {
  not_built("reduced_last_2d");
}
[[noreturn]] inline void sum_rows(const Tensor&, const Tensor&, bool) {
  not_built("sum");
}
[[noreturn]] inline void sum_reduce(const Tensor&, const std::vector<bool>&, const Tensor&, bool) {
  not_built("sum");
}
#endif

}  // namespace kiln::gpu
