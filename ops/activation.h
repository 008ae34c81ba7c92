// Activations beyond ops/elementwise.h's, each PyTorch 1.13's formula composed of elementwise ops
// (their gradients are the composition's, equal to PyTorch's away from the kinks).
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

// x for x > 0, alpha (e^x - 1) otherwise.
Tensor elu(const Tensor& x, double alpha = 1.0);
// log(1 + e^(beta x)) / beta, and x itself where beta x > threshold (PyTorch's linear region).
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
// x min(max(x + 3, 0), 6) / 6.
Tensor hardswish(const Tensor& x);
// x for x > 0, weight x otherwise; weight has 1 element or one per channel (dim 1 of x).
Tensor prelu(const Tensor& x, const Tensor& weight);

}  // namespace kiln
