// CPU softmax and log_softmax along one dim. The input is contiguous and viewed as
// [outer, size, inner], where size is the softmax dim: inner == 1 is the common "rows" case, and
// inner > 1 (softmax over channels of [N, C, H, W]) walks the dim with stride inner.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::cpu {

// out = softmax(x) (or log_softmax) along `dim`; x and out are contiguous, of one shape and one
// floating dtype. Subtracts each row's max before exponentiating; 16-bit floats compute in f32.
void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out);

}  // namespace kiln::cpu
