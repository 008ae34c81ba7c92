// The fused cross-entropy family: one kernel for each row's logsumexp and loss (with label
// smoothing and class weights), one for the gradient of the logits. The layout is nll_loss's
// (kernels/loss.h); a row is one (n, s), R = N * S rows. Only the GPU has it
// (kernels/cuda/cross_entropy.cu): the CPU's table is empty (kernels/cpu/cross_entropy.cpp), and
// ops/loss.cpp composes log_softmax and nll_loss there.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

struct CrossEntropyKernels {
  // Writes lse[r] (contiguous [R], f64 for f64 logits, else f32) and losses[r] (contiguous [R],
  // the logits' dtype or f64): (1 - eps) (-w[t] log p_t) + eps / C (-sum_c w[c] log p_c), 0
  // where the target is ignore_index. Null where the device has no fused kernel.
  void (*forward)(const Tensor& logits, const Tensor& target, const Tensor& weight,
                  int64_t ignore_index, double label_smoothing, const Tensor& lse,
                  const Tensor& losses);
  // grad_logits (contiguous [N, C, S], the logits' dtype) = g_r / denominator * (softmax - the
  // weighted smoothed target) per row, 0 on ignored rows. grad is contiguous in lse's dtype: [R]
  // when per_row, else one element for every row. weight_sum is sum_c w[c] as a one-element
  // tensor of lse's dtype, needed only when weight is defined and label_smoothing > 0.
  // denominator is one element of lse's dtype on the device (the mean's total weight, read there
  // so that a CUDA graph holds it), or undefined for 1.
  void (*backward)(const Tensor& grad, bool per_row, const Tensor& logits, const Tensor& target,
                   const Tensor& weight, const Tensor& weight_sum, const Tensor& lse,
                   int64_t ignore_index, double label_smoothing, const Tensor& denominator,
                   const Tensor& grad_logits);

  static const CrossEntropyKernels cpu;
  static const CrossEntropyKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
