// CUDA strided copy with dtype conversion, and fill: the twins of kernels/cpu/copy.h, behind
// contiguous(), to(), copy_() and fill_() of tensors on a GPU. Both operands on one device.
#pragma once

#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA
// dst[i] = convert(src[i]); src already has dst's shape (expanded if it broadcast).
void copy(const Tensor& src, const Tensor& dst);
void fill(const Tensor& dst, double value);
#else
[[noreturn]] inline void copy(const Tensor&, const Tensor&) {
  not_built("copy");
}
[[noreturn]] inline void fill(const Tensor&, double) {
  not_built("fill");
}
#endif

}  // namespace kiln::gpu
