// CUDA cumsum: the twin of kernels/cpu/scan.h (x may be strided; out has x's shape; floating sums
// accumulate in double and integer ones in i64, as on the CPU, so long running sums agree).
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA
void cumsum(const Tensor& x, int64_t dim, bool reverse, const Tensor& out);
#else
[[noreturn]] inline void cumsum(const Tensor&, int64_t, bool, const Tensor&) {
  not_built("cumsum");
}
#endif

}  // namespace kiln::gpu
