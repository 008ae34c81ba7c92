// Fused CUDA cross-entropy over class indices: one kernel computes each row's logsumexp and loss
// (with label smoothing and class weights), a second the gradient of the logits in one pass. The
// layout is nll_loss's (kernels/cpu/loss.h): logits contiguous [N, C, S], i64 targets contiguous
// [N, S] that passed scan_nll_targets, weight contiguous [C] of the logits' dtype or undefined.
// A row is one (n, s); R = N * S rows. There is no CPU twin: the CPU composes log_softmax and
// nll_loss (ops/loss.cpp).
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA
// Writes lse[r] (contiguous [R], f64 for f64 logits, else f32) and losses[r] (contiguous [R], the
// logits' dtype or f64): (1 - eps) (-w[t] log p_t) + eps / C (-sum_c w[c] log p_c), 0 where the
// target is ignore_index.
void cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                           int64_t ignore_index, double label_smoothing, const Tensor& lse,
                           const Tensor& losses);
// grad_logits (contiguous [N, C, S], the logits' dtype) = g_r / denominator * (softmax - the
// weighted smoothed target) per row, 0 on ignored rows. grad is contiguous in lse's dtype: [R]
// when per_row, else one element for every row. weight_sum is sum_c w[c] as a one-element tensor
// of lse's dtype, needed only when weight is defined and label_smoothing > 0.
void cross_entropy_backward(const Tensor& grad, bool per_row, const Tensor& logits,
                            const Tensor& target, const Tensor& weight, const Tensor& weight_sum,
                            const Tensor& lse, int64_t ignore_index, double label_smoothing,
                            double denominator, const Tensor& grad_logits);
#else
[[noreturn]] inline void cross_entropy_forward(const Tensor&, const Tensor&, const Tensor&, int64_t,
                                               double, const Tensor&, const Tensor&) {
  not_built("cross_entropy");
}
[[noreturn]] inline void cross_entropy_backward(const Tensor&, bool, const Tensor&, const Tensor&,
                                                const Tensor&, const Tensor&, const Tensor&,
                                                int64_t, double, double, const Tensor&) {
  not_built("cross_entropy");
}
#endif

}  // namespace kiln::gpu
