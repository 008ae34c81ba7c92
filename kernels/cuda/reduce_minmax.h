// CUDA max/min reductions: the twin of kernels/cpu/reduce_minmax.h, plus minmax_reduce, which
// reduces any dims of a strided tensor without the permuted copy. Same semantics as the CPU: the
// index is the first occurrence of the extreme (the smallest row-major index over the reduced
// dims), and NaN is the extreme (the first NaN wins).
#pragma once

#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA
void minmax_rows(const Tensor& x2d, bool is_max, const Tensor& values, const Tensor& indices);
// values/indices (either may be undefined; contiguous, one element per output) = the max (or min)
// of x over the dims where reduced[d] is true. Every reduction must cover at least one element.
void minmax_reduce(const Tensor& x, const std::vector<bool>& reduced, bool is_max,
                   const Tensor& values, const Tensor& indices);
#else
[[noreturn]] inline void minmax_rows(const Tensor&, bool, const Tensor&, const Tensor&) {
  not_built("max");
}
[[noreturn]] inline void minmax_reduce(const Tensor&, const std::vector<bool>&, bool, const Tensor&,
                                       const Tensor&) {
  not_built("max");
}
#endif

}  // namespace kiln::gpu
