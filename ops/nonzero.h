// The ops whose result's size depends on the values, as torch's: nonzero, masked_select and
// unique. Each needs the count before it can allocate, so on a GPU it waits for the GPU (as
// PyTorch's do): nonzero copies the mask to the host, finds the positions there, and copies them
// back; masked_select and unique are built on it, sort and index_select.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

// The indices of x's nonzero elements, i64 [count, x.dim()], in row-major order.
Tensor nonzero(const Tensor& x);
// The elements of x where mask (bool, broadcast with x) is true, flattened in row-major order;
// differentiable in x.
Tensor masked_select(const Tensor& x, const Tensor& mask);

struct UniqueResult {
  Tensor values;   // the distinct values of x, ascending
  Tensor inverse;  // i64 of x's shape: each element's index in values
  Tensor counts;   // i64: how often each value occurs
};
// torch.unique(x, sorted=True, return_inverse=True, return_counts=True) over the flattened x.
UniqueResult unique(const Tensor& x);
// The same along `dim` (torch.unique(x, dim=dim, ...)): the distinct slices x.select(dim, i), in
// lexicographic order, as values with `dim` their count; inverse and counts are [x.size(dim)] and
// [count]. Composed of stable sorts, one per element of a slice, so every device runs it.
UniqueResult unique(const Tensor& x, int64_t dim);

}  // namespace kiln
