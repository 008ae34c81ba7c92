// CUDA pooling kernels: the twins of kernels/cpu/pooling.h, same signatures and contract (every
// tensor contiguous [N, C, H, W] in f32 or f64). Forward values match the CPU bit for bit (same
// window order, double sums); avg and adaptive-avg backward gather per input element in the
// CPU's order, so they match too and are deterministic. max_pool2d_backward scatters with
// atomicAdd: only inputs that are the maximum of several overlapping windows take more than one
// add, and their sum order (not value set) may vary from run to run.
#pragma once

#include "kiln/kernels/cpu/pooling.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA
void max_pool2d(const Tensor& x, const Tensor& out, const Tensor& indices,
                const cpu::Pool2dGeometry& g);
void max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                         const Tensor& grad_input);
void avg_pool2d(const Tensor& x, const Tensor& out, const cpu::Pool2dGeometry& g,
                bool count_include_pad);
void avg_pool2d_backward(const Tensor& grad_output, const Tensor& grad_input,
                         const cpu::Pool2dGeometry& g, bool count_include_pad);
void adaptive_avg_pool2d(const Tensor& x, const Tensor& out);
void adaptive_avg_pool2d_backward(const Tensor& grad_output, const Tensor& grad_input);
#else
[[noreturn]] inline void max_pool2d(const Tensor&, const Tensor&, const Tensor&,
                                    const cpu::Pool2dGeometry&) {
  not_built("max_pool2d");
}
[[noreturn]] inline void max_pool2d_backward(const Tensor&, const Tensor&, const Tensor&) {
  not_built("max_pool2d_backward");
}
[[noreturn]] inline void avg_pool2d(const Tensor&, const Tensor&, const cpu::Pool2dGeometry&,
                                    bool) {
  not_built("avg_pool2d");
}
[[noreturn]] inline void avg_pool2d_backward(const Tensor&, const Tensor&,
                                             const cpu::Pool2dGeometry&, bool) {
  not_built("avg_pool2d_backward");
}
[[noreturn]] inline void adaptive_avg_pool2d(const Tensor&, const Tensor&) {
  not_built("adaptive_avg_pool2d");
}
[[noreturn]] inline void adaptive_avg_pool2d_backward(const Tensor&, const Tensor&) {
  not_built("adaptive_avg_pool2d_backward");
}
#endif

}  // namespace kiln::gpu
