// softmax and log_softmax along one dim.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);  // max-subtracted, stable

}  // namespace kiln
