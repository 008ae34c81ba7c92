// The random family: tensors filled from the Philox stream, element i from (seed, offset, i)
// alone, so a seed gives the same values on every device and any launch shape
// (kernels/cpu/random.cpp, kernels/cuda/random.cu).
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

struct RandomKernels {
  // out (contiguous, any floating dtype)[i] = philox_uniform_in(seed, offset, i, low, high).
  void (*uniform)(const Tensor& out, uint64_t seed, uint64_t offset, double low, double high);

  static const RandomKernels cpu;
  static const RandomKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
