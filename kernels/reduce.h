// The sum family: sums and means over any set of dims, on every device (kernels/cpu/reduce.cpp,
// kernels/cuda/reduce.cu). Floating sums accumulate in double on the CPU and in the accumulation
// type on the GPU; integer sums in i64.
#pragma once

#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

struct ReduceKernels {
  // out = sum (or mean) of x (any strides) over the dims where reduced[d] is true; out is
  // contiguous, with the kept dims of x in order (one element when every dim is reduced).
  void (*sum)(const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, bool mean);

  static const ReduceKernels cpu;
  static const ReduceKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
