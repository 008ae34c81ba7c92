// Convolutions as im2col + GEMM (im2col.cpp), in f32 and f64: the operands of Conv2dKernels' three
// functions, all contiguous, of one of those dtypes.
#pragma once

#include "kiln/core/tensor.h"
#include "kiln/kernels/conv2d.h"

namespace kiln::cpu {

void im2col_conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Tensor& out, const Conv2dGeometry& g);
void im2col_conv2d_backward_input(const Tensor& grad_out, const Tensor& weight,
                                  const Tensor& grad_x, const Conv2dGeometry& g);
void im2col_conv2d_backward_weight(const Tensor& grad_out, const Tensor& x,
                                   const Tensor& grad_weight, const Conv2dGeometry& g);

}  // namespace kiln::cpu
