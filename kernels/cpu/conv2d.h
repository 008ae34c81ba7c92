// CPU 2-D convolution as im2col + GEMM: each image (and group) is unfolded into a column matrix
// [C/groups * kH * kW, OH * OW] and multiplied by the weight matrix [O/groups, C/groups * kH * kW].
// The backward passes use the same matrices: col2im of weightᵀ · grad for the input, and
// grad · colᵀ summed over images for the weight. That is the f64 path, the readable reference;
// f32 convolutions, the ones models train with, run on conv2d_direct.h's kernels instead.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::cpu {

// Sizes of one convolution, already checked by ops/conv.cpp.
struct Conv2dGeometry {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0, out_h = 0, out_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

// Every tensor is contiguous and f32 or f64, all of one dtype, and non-empty (ops/conv.cpp
// settles the zero-size cases); bias may be undefined.
// out [N, O, OH, OW] = conv(x [N, C, H, W], weight [O, C/groups, kH, kW]) + bias [O].
void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const Conv2dGeometry& g);
// grad_x [N, C, H, W] (overwritten) from grad_out [N, O, OH, OW].
void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                           const Conv2dGeometry& g);
// grad_weight [O, C/groups, kH, kW] (overwritten) from grad_out and x.
void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                            const Conv2dGeometry& g);

}  // namespace kiln::cpu
