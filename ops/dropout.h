// dropout, and dropout2d (whole channels).
#pragma once

#include "kiln/core/generator.h"
#include "kiln/core/tensor.h"

namespace kiln {

// Zeroes each element with probability p and scales the rest by 1/(1-p); identity when not
// training. The mask comes from the Philox stream, so it is the same on CPU and GPU.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true,
               Generator* generator = nullptr);
// Dropout of whole channels, as torch.nn.functional.dropout2d: x [N, C, H, W]; each (sample,
// channel) plane is zeroed with probability p and the rest scaled by 1/(1-p). The mask is
// dropout's, drawn for [N, C].
Tensor dropout2d(const Tensor& x, double p = 0.5, bool training = true,
                 Generator* generator = nullptr);

}  // namespace kiln
