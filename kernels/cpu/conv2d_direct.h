// f32 convolutions computed straight from a padded copy of the input: no column matrix, no
// packing of it, no staging of the product. conv2d.cpp sends every f32 convolution here, forward
// and both gradients; f64 takes im2col + GEMM. The layout and the two micro-kernels are described
// in conv2d_direct.cpp.
#pragma once

#include "kiln/kernels/conv2d.h"

namespace kiln::cpu {

// out [N, O, OH, OW] = conv(x, weight) + bias; bias may be null. All contiguous.
void direct_conv2d_forward(const float* x, const float* weight, const float* bias, float* out,
                           const Conv2dGeometry& g);

// grad_x [N, C, H, W] (overwritten) from grad_out [N, O, OH, OW]: each of the stride x stride
// phases of grad_x is a stride-1 convolution of grad_out with the phase's taps, flipped.
void direct_conv2d_backward_input(const float* grad_out, const float* weight, float* grad_x,
                                  const Conv2dGeometry& g);

// grad_weight [O, C/groups, kH, kW] (overwritten) = sum over images of grad_out ⋆ x.
void direct_conv2d_backward_weight(const float* grad_out, const float* x, float* grad_weight,
                                   const Conv2dGeometry& g);

}  // namespace kiln::cpu
