// conv2d, and its two gradients as ops of their own (conv_transpose2d and conv1d are built on them
// in ops/conv_transpose.cpp): conv2d's backward is written with them, and
// each device implements them next to conv2d (kernels/conv2d.h). The gradient ops are
// differentiable too (double backward, autograd::grad with create_graph).
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"
#include "kiln/ops/pair.h"

namespace kiln {

// x [N, C, H, W], weight [O, C/groups, kH, kW], bias [O] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              Pair stride = {1, 1}, Pair padding = {0, 0}, Pair dilation = {1, 1},
              int64_t groups = 1);

// The gradient of conv2d with respect to its input [N, C, H, W] = input_shape, from
// grad_output [N, O, OH, OW] and weight [O, C/groups, kH, kW].
Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight,
                             const Shape& input_shape, Pair stride = {1, 1}, Pair padding = {0, 0},
                             Pair dilation = {1, 1}, int64_t groups = 1);
// The gradient of conv2d with respect to its weight [O, C/groups, kH, kW] = weight_shape, from
// grad_output [N, O, OH, OW] and conv2d's input [N, C, H, W].
Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& input,
                              const Shape& weight_shape, Pair stride = {1, 1},
                              Pair padding = {0, 0}, Pair dilation = {1, 1}, int64_t groups = 1);

// The transpose (adjoint) of conv2d, as torch.nn.functional.conv_transpose2d: x [N, C, H, W],
// weight [C, O/groups, kH, kW], bias [O]; the output is
// [N, O, (H - 1) * stride - 2 * padding + dilation * (kH - 1) + output_padding + 1, ...].
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        Pair stride = {1, 1}, Pair padding = {0, 0}, Pair output_padding = {0, 0},
                        int64_t groups = 1, Pair dilation = {1, 1});
// x [N, C, L], weight [O, C/groups, k]: conv2d over a height of one.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);

}  // namespace kiln
