// CPU scans (running reductions along one dim).
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::cpu {

// out = the running sum of x along dim, from the last element backwards when `reverse`. x may be
// strided and must have at least one dim; out has x's shape. Floating sums accumulate in double,
// integer ones in i64.
void cumsum(const Tensor& x, int64_t dim, bool reverse, const Tensor& out);

}  // namespace kiln::cpu
