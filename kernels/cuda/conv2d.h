// GPU 2-D convolution through cuDNN, the twin of kernels/cpu/conv2d.h (same geometry, same
// entry points). Algorithms come from cuDNN's heuristics, or from timing them when
// backends::cudnn_benchmark() is on, and are cached per geometry, dtype and device;
// backends::cudnn_deterministic() keeps only deterministic ones. Workspaces come from kiln's
// allocator; an algorithm whose workspace does not fit gives way to the next one.
#pragma once

#include "kiln/core/tensor.h"
#include "kiln/kernels/cpu/conv2d.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA

// Every tensor is contiguous, on one GPU, non-empty (ops/conv.cpp settles the zero-size
// cases), and of one dtype among f32, f64, f16 and bf16 (the 16-bit types accumulate in f32); bias
// may be undefined.
// out [N, O, OH, OW] = conv(x [N, C, H, W], weight [O, C/groups, kH, kW]) + bias [O].
void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const cpu::Conv2dGeometry& g);
// grad_x [N, C, H, W] (overwritten) from grad_out [N, O, OH, OW].
void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                           const cpu::Conv2dGeometry& g);
// grad_weight [O, C/groups, kH, kW] (overwritten) from grad_out and x.
void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                            const cpu::Conv2dGeometry& g);

#else

[[noreturn]] inline void conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const cpu::Conv2dGeometry&) {
  not_built("conv2d_forward");
}
[[noreturn]] inline void conv2d_backward_input(const Tensor&, const Tensor&, const Tensor&,
                                               const cpu::Conv2dGeometry&) {
  not_built("conv2d_backward_input");
}
[[noreturn]] inline void conv2d_backward_weight(const Tensor&, const Tensor&, const Tensor&,
                                                const cpu::Conv2dGeometry&) {
  not_built("conv2d_backward_weight");
}

#endif

}  // namespace kiln::gpu
