// The CPU's max_pool2d forward (kernels/cpu/max_pool.cpp), for PoolingKernels::cpu.
#pragma once

#include "kiln/core/tensor.h"
#include "kiln/kernels/pooling.h"

namespace kiln::cpu {

// x in f32, f64 or bf16 (bf16 compared as its f32 value, written back as it was: a maximum is
// one of its inputs, so no rounding).
void max_pool2d(const Tensor& x, const Tensor& out, const Tensor& indices, const Pool2dGeometry& g);

}  // namespace kiln::cpu
