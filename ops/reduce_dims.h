// Which dims a reduction removes, and the output shape with and without keepdim.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/ops/reduce.h"

namespace kiln {

struct ReducedShape {
  std::vector<bool> reduced;  // per input dim
  Shape kept_shape;           // the output shape with keepdim (reduced dims become 1)
  Shape out_shape;            // the output shape as requested
  int64_t count = 1;          // elements folded into each output element
};

// dims empty means every dim; dims are wrapped and checked for repeats.
ReducedShape reduced_shape(const char* op, const Tensor& x, const Dims& dims, bool keepdim);

}  // namespace kiln
