// f32 and bf16 convolutions computed straight from a padded copy of the input: no column matrix,
// no packing of it, no staging of the product. One of the candidates choice.cpp picks from: in f32
// everywhere, in bf16 where the CPU has bf16 dot products (direct_conv2d_takes_bf16). The layout
// and the micro-kernels are described in direct.cpp; the bf16 versions sum their products in f32
// and round the result once.
#pragma once

#include "kiln/core/half.h"
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

// Whether the bf16 versions below run this convolution: the CPU kernels in use have bf16 dot
// products (core/cpu_isa.h's avx512_bf16) and it has one group.
bool direct_conv2d_takes_bf16(const Conv2dGeometry& g);
void direct_conv2d_forward(const BFloat16* x, const BFloat16* weight, const BFloat16* bias,
                           BFloat16* out, const Conv2dGeometry& g);
void direct_conv2d_backward_input(const BFloat16* grad_out, const BFloat16* weight,
                                  BFloat16* grad_x, const Conv2dGeometry& g);
void direct_conv2d_backward_weight(const BFloat16* grad_out, const BFloat16* x,
                                   BFloat16* grad_weight, const Conv2dGeometry& g);

}  // namespace kiln::cpu
