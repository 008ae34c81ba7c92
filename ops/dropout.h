// dropout.
#pragma once

#include "kiln/core/generator.h"
#include "kiln/core/tensor.h"

namespace kiln {

// Zeroes each element with probability p and scales the rest by 1/(1-p); identity when not
// training. The mask comes from the Philox stream, so it is the same on CPU and GPU.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true,
               Generator* generator = nullptr);

}  // namespace kiln
