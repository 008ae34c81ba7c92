// Stride-1 f32 convolutions computed straight from a padded copy of the input: no column matrix,
// no packing of it, no staging of the product. conv2d.cpp routes every convolution this covers
// here (the 3x3 and 1x1 stride-1 layers of a ResNet, forward and both gradients) and the rest to
// im2col + GEMM. The layout and the two micro-kernels are described in conv2d_direct.cpp.
#pragma once

#include "kiln/kernels/cpu/conv2d.h"

namespace kiln::cpu {

// Stride 1 and padding no wider than the kernel's reach in both dims, the only shapes the padded
// layout holds. Everything else about the convolution (groups, dilation, any kernel size) is.
bool direct_conv2d_applies(const Conv2dGeometry& g);

// out [N, O, OH, OW] = conv(x, weight) + bias; bias may be null. All contiguous.
void direct_conv2d_forward(const float* x, const float* weight, const float* bias, float* out,
                           const Conv2dGeometry& g);

// grad_weight [O, C/groups, kH, kW] (overwritten) = sum over images of grad_out ⋆ x.
void direct_conv2d_backward_weight(const float* grad_out, const float* x, float* grad_weight,
                                   const Conv2dGeometry& g);

}  // namespace kiln::cpu
