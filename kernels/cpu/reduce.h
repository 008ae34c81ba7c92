// CPU reductions. Each reduction first lays its input out as a contiguous [outer, inner] matrix
// with the reduced dims last, so every output element reduces one contiguous run.
#pragma once

#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::cpu {

// x with the dims where reduced[d] is true moved last, made contiguous, viewed as [outer, inner].
Tensor reduced_last_2d(const Tensor& x, const std::vector<bool>& reduced);

// out[i] = sum_j x2d[i, j] (or the mean); out is contiguous with x2d.size(0) elements. Floating
// sums accumulate in double; integer sums in i64.
void sum_rows(const Tensor& x2d, const Tensor& out, bool mean);

}  // namespace kiln::cpu
