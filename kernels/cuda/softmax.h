// CUDA softmax and log_softmax: the twin of kernels/cpu/softmax.h (same layout contract: x and
// out contiguous, viewed as [outer, size, inner]; max subtracted first; 16-bit floats computed in
// f32), plus the fused backward the CPU writes with ops.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA
void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out);
// grad_x = y * (g - sum(g * y)) for softmax, g - exp(y) * sum(g) for log_softmax, sums along
// dim; y (the forward's output), g and grad_x contiguous, of one shape and floating dtype.
void softmax_backward(const Tensor& y, const Tensor& g, int64_t dim, bool log,
                      const Tensor& grad_x);
#else
[[noreturn]] inline void softmax(const Tensor&, int64_t, bool, const Tensor&) {
  not_built("softmax");
}
[[noreturn]] inline void softmax_backward(const Tensor&, const Tensor&, int64_t, bool,
                                          const Tensor&) {
  not_built("softmax");
}
#endif

}  // namespace kiln::gpu
