// CUDA normalisation kernels: the twins of kernels/cpu/normalization.h, same signatures and the
// same contract (inputs contiguous in f32 or f64; statistics accumulate in double, as the CPU's,
// so both devices agree to the last bits of the compute dtype).
#pragma once

#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA
void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var);
void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& out);
// grad_x (may be undefined), and per-channel sum_g = Σ g and sum_g_xhat = Σ g * x_hat over N and
// spatial, as cpu::batch_norm_backward.
void batch_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, bool training,
                         const Tensor& grad_x, const Tensor& sum_g, const Tensor& sum_g_xhat);
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                const Tensor& out, const Tensor& mean, const Tensor& invstd);
#else
[[noreturn]] inline void batch_norm_stats(const Tensor&, const Tensor&, const Tensor&) {
  not_built("batch_norm");
}
[[noreturn]] inline void batch_norm_apply(const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&, const Tensor&, const Tensor&) {
  not_built("batch_norm");
}
[[noreturn]] inline void batch_norm_backward(const Tensor&, const Tensor&, const Tensor&,
                                             const Tensor&, const Tensor&, bool, const Tensor&,
                                             const Tensor&, const Tensor&) {
  not_built("batch_norm_backward");
}
[[noreturn]] inline void layer_norm(const Tensor&, const Tensor&, const Tensor&, double,
                                    const Tensor&, const Tensor&, const Tensor&) {
  not_built("layer_norm");
}
#endif

}  // namespace kiln::gpu
