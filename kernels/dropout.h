// The dropout family: the keep mask drawn and applied in one pass, on every device
// (kernels/cpu/dropout.cpp, kernels/cuda/dropout.cu). Element i is kept iff
// philox_uniform(seed, offset, i) >= p, so one seed and offset give one mask everywhere.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

struct DropoutKernels {
  // x contiguous and floating; out and mask contiguous of x's shape and dtype; 0 <= p < 1.
  // mask = kept / (1 - p) rounded to x's dtype, out = x * mask.
  void (*dropout)(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out,
                  const Tensor& mask);

  static const DropoutKernels cpu;
  static const DropoutKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
