// The scan family: running reductions along one dim, on every device (kernels/cpu/scan.cpp,
// kernels/cuda/scan.cu).
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

struct ScanKernels {
  // out = the running sum of x along dim, from the last element backwards when `reverse`. x may
  // be strided and has at least one dim; out has x's shape. Floating sums accumulate in double on
  // the CPU (the accumulation type on the GPU), integer ones in i64.
  void (*cumsum)(const Tensor& x, int64_t dim, bool reverse, const Tensor& out);

  static const ScanKernels cpu;
  static const ScanKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
