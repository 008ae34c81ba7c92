// What the GPU parity tests share: how close a CUDA result must be to the CPU's, per dtype (the
// CUDA issue's table). Integer and bool results must match exactly.
#pragma once

#include "kiln/core/dtype.h"

namespace kiln::testing {

inline double dtype_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 1e-5;
    case DType::f64:
      return 1e-12;
    case DType::f16:
      return 1e-3;
    case DType::bf16:
      return 1.6e-2;
    default:
      return 0.0;
  }
}

}  // namespace kiln::testing
