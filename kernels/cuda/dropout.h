// Fused CUDA dropout: draws the keep mask and applies it in one pass. Element i is kept iff
// philox_uniform(seed, offset, i) >= p, the rule of the composed path in ops/dropout.cpp,
// so one seed and offset give the CPU's mask.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA
// x contiguous and floating; out and mask contiguous of x's shape and dtype; 0 <= p < 1.
// mask = kept / (1 - p) rounded to x's dtype, out = x * mask.
void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out,
             const Tensor& mask);
#else
[[noreturn]] inline void dropout(const Tensor&, double, uint64_t, uint64_t, const Tensor&,
                                 const Tensor&) {
  not_built("dropout");
}
#endif

}  // namespace kiln::gpu
