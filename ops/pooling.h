// 2-D pooling: max, average and adaptive average and max, max pooling with its argmax indices, and
// the backward ops the pooling nodes call (not differentiable themselves).
#pragma once

#include "kiln/core/tensor.h"
#include "kiln/ops/pair.h"

namespace kiln {

// stride {0, 0} means stride = kernel_size, as PyTorch's default.
Tensor max_pool2d(const Tensor& x, Pair kernel_size, Pair stride = {0, 0}, Pair padding = {0, 0},
                  Pair dilation = {1, 1}, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& x, Pair kernel_size, Pair stride = {0, 0}, Pair padding = {0, 0},
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size);
// The maximum over each adaptive window (rows floor(i * H / oh) to ceil((i + 1) * H / oh), and so
// for columns), as torch.nn.functional.adaptive_max_pool2d; the gradient goes to the first maximum
// of each window. max_pool2d where the windows tile the input, else a max per window.
Tensor adaptive_max_pool2d(const Tensor& x, Pair output_size);

struct MaxPool2dResult {
  Tensor values;
  Tensor indices;  // i64, ih * W + iw of each maximum within its input plane
};
// max_pool2d with PyTorch's return_indices; differentiable in the values.
MaxPool2dResult max_pool2d_with_indices(const Tensor& x, Pair kernel_size, Pair stride = {0, 0},
                                        Pair padding = {0, 0}, Pair dilation = {1, 1},
                                        bool ceil_mode = false);

// Zeros of input_shape, plus grad_output scattered to the saved argmax indices.
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                           const Shape& input_shape);
// Spreads each output gradient evenly over its window, with avg_pool2d's divisor.
Tensor avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape, Pair kernel_size,
                           Pair stride = {0, 0}, Pair padding = {0, 0}, bool ceil_mode = false,
                           bool count_include_pad = true);
// Spreads each output gradient evenly over its adaptive window.
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape);

}  // namespace kiln
