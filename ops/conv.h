// conv2d, and its two gradients as ops of their own: conv2d's backward is written with them, and
// each device implements them next to conv2d (kernels/conv2d.h). Neither gradient op is
// differentiable (no double backward).
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

}  // namespace kiln
