// The max/min family: extremes over any set of dims, with the index of the first occurrence, on
// every device (kernels/cpu/reduce_minmax.cpp, kernels/cuda/reduce_minmax.cu).
#pragma once

#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

struct MinMaxKernels {
  // values = max (or min) of x over the dims where reduced[d] is true, indices (i64) = the
  // position of its first occurrence within the reduced dims laid out row-major. NaN counts as
  // the extreme, as in PyTorch. Either output may be undefined to skip it; both are contiguous,
  // with the kept dims of x. Every reduction must cover at least one element.
  void (*minmax)(const Tensor& x, const std::vector<bool>& reduced, bool is_max,
                 const Tensor& values, const Tensor& indices);

  static const MinMaxKernels cpu;
  static const MinMaxKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
