// The CPU's max_pool2d and its backward (kernels/cpu/max_pool.cpp), for PoolingKernels::cpu.
#pragma once

#include "kiln/core/tensor.h"
#include "kiln/kernels/pooling.h"

namespace kiln::cpu {

// x in f32, f64 or bf16 (bf16 compared as its f32 value, written back as it was: a maximum is
// one of its inputs, so no rounding).
void max_pool2d(const Tensor& x, const Tensor& out, const Tensor& indices, const Pool2dGeometry& g);

// grad_input += grad_output at the indices, in f32 or f64 (grad_input zero-filled by the caller);
// in bf16 grad_input is overwritten, each plane summed in f32 and rounded once.
void max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                         const Tensor& grad_input);

}  // namespace kiln::cpu
