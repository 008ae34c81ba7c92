// The softmax family: softmax and log_softmax along one dim and their backward, on every device
// (kernels/cpu/softmax.cpp, kernels/cuda/softmax.cu). Tensors are contiguous, viewed as
// [outer, size, inner] where size is the softmax dim; 16-bit floats compute in f32.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

struct SoftmaxKernels {
  // out = softmax(x) (or log_softmax) along dim; x and out of one shape and floating dtype. Each
  // row's max is subtracted before exponentiating.
  void (*softmax)(const Tensor& x, int64_t dim, bool log, const Tensor& out);
  // grad_x from the forward's output y and the gradient g of it, in one pass per row:
  // g - exp(y) sum(g) for log_softmax, y (g - sum(g y)) for softmax.
  void (*softmax_backward)(const Tensor& y, const Tensor& g, int64_t dim, bool log,
                           const Tensor& grad_x);

  static const SoftmaxKernels cpu;
  static const SoftmaxKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
