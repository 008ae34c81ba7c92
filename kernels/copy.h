// The copy family: strided copy with dtype conversion, and fill: the kernels behind to(),
// contiguous(), clone(), copy_() and fill_(), on every device (kernels/cpu/copy.cpp,
// kernels/cuda/copy.cu). Both operands on one device; ops/copy.cpp moves bytes across devices.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

struct CopyKernels {
  // dst[i] = convert(src[i]); src already has dst's shape (expanded if it broadcast).
  void (*copy)(const Tensor& src, const Tensor& dst);
  void (*fill)(const Tensor& dst, double value);

  static const CopyKernels cpu;
  static const CopyKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
