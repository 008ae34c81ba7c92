// Reductions over any set of dims (an empty list means every dim), with keepdim, and scans.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

using Dims = std::vector<int64_t>;

// Integer and bool inputs sum to i64, as in PyTorch.
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
// Sum of squared deviations / (N - correction); correction 1 is the unbiased estimate.
Tensor var(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std_dev(const Tensor& x, const Dims& dims = {}, int64_t correction = 1,
               bool keepdim = false);
// p-norm over dims: (sum |x|^p)^(1/p); p = inf gives max |x|.
Tensor norm(const Tensor& x, double p = 2.0, const Dims& dims = {}, bool keepdim = false);

struct ValuesIndices {
  Tensor values;
  Tensor indices;  // i64, the first occurrence of the extreme value
};
// Max or min along one dim, with the index of each; differentiable in the values.
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
// Over every element; the gradient is shared evenly between ties, as PyTorch's amax.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // index into the flattened tensor

Tensor cumsum(const Tensor& x, int64_t dim);
// The running product along dim, and the product over dims (every dim when empty); integers and
// bool widen to i64, as in PyTorch. The gradients are exact where x holds zeros (no division).
Tensor cumprod(const Tensor& x, int64_t dim);
Tensor prod(const Tensor& x, const Dims& dims = {}, bool keepdim = false);

// Sums `x` down to `shape` (which x's shape broadcasts from): the backward of broadcasting.
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace kiln
