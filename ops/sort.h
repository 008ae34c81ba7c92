// Sorting, as torch's: sort (always stable), argsort and topk along one dim, on every device and
// dtype. The values are gathered from the input by the indices, so they are differentiable and
// their gradient goes back to the positions they came from.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"
#include "kiln/ops/reduce.h"

namespace kiln {

// x's elements along dim in ascending order (descending: largest first), and the index in x of
// each; equal elements keep their order, NaN sorts above every number.
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false);
// sort(...).indices.
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
// The k largest (smallest, when !largest) elements along dim, largest first (smallest first), and
// their indices; among equal elements the earlier ones are taken first. The result is always
// sorted, which torch.topk(sorted=False) also allows.
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

}  // namespace kiln
