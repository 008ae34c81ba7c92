// CPU max/min reductions over rows of a contiguous [outer, inner] matrix (see reduced_last_2d).
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::cpu {

// For each row i of x2d: values[i] = its max (or min), indices[i] = the column of its first
// occurrence. NaN counts as the extreme, as in PyTorch. Either output may be undefined to skip it;
// values has x2d's dtype, indices is i64, both contiguous with x2d.size(0) elements. Rows must be
// non-empty.
void minmax_rows(const Tensor& x2d, bool is_max, const Tensor& values, const Tensor& indices);

}  // namespace kiln::cpu
