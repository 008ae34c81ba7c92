// Strided copy with dtype conversion, and fill: the kernels behind contiguous(), to(), copy_().
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::cpu {

// dst[i] = convert(src[i]); src already has dst's shape (expanded if it broadcast).
void copy(const Tensor& src, const Tensor& dst);
void fill(const Tensor& dst, double value);

}  // namespace kiln::cpu
