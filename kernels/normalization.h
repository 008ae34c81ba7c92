// The normalisation family: batch norm's statistics, apply and backward, and layer norm, on
// every device (kernels/cpu/normalization.cpp, kernels/cuda/normalization.cu). Inputs arrive
// contiguous in f32 or f64, statistics accumulate in double and are stored in x's dtype; where
// takes_half is set, batch norm's x, grad, out and grad_x may also be f16 or bf16, with the
// statistics, weight, bias and per-channel sums in f32 (ops/normalization.cpp converts the 16-bit
// floats to f32 for the other devices).
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

struct NormalizationKernels {
  // x [N, C, S]: per channel, mean and biased variance over N and S (0 and 0 when N * S is 0).
  void (*batch_norm_stats)(const Tensor& x, const Tensor& mean, const Tensor& var);
  // out[n, c, s] = (x[n, c, s] - mean[c]) * invstd[c] * weight[c] + bias[c]; weight and bias may
  // be undefined (1 and 0). With relu (only where fuses_relu), out = max(that, 0) in the same
  // pass.
  void (*batch_norm_apply)(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                           const Tensor& weight, const Tensor& bias, const Tensor& out, bool relu);
  // The whole of batch norm's backward in two passes over x and grad (contiguous [N, C, S]): the
  // per-channel sums sum_g = Σ g and sum_g_xhat = Σ g * x_hat over N and S, then, when grad_x is
  // defined, dx = w * invstd / M * (M * g - sum_g - x_hat * sum_g_xhat) in training (the batch
  // statistics depend on every x) or dx = g * w * invstd in inference. weight may be undefined
  // (1). With relu (only where fuses_relu), the backward of relu(batch_norm(x)): g counts only
  // where the forward's output was positive, worked out again from x, the statistics, weight and
  // bias with the very expression batch_norm_apply used, so the mask is bit for bit the forward's,
  // and taken after rounding to out_dtype, the dtype the op's output is stored in (x's, or the
  // 16-bit float x was widened from): a y that rounds to 0 there passes no gradient, as PyTorch's
  // relu backward reads the stored output.
  void (*batch_norm_backward)(const Tensor& x, const Tensor& grad, const Tensor& mean,
                              const Tensor& invstd, const Tensor& weight, bool training,
                              const Tensor& grad_x, const Tensor& sum_g, const Tensor& sum_g_xhat,
                              bool relu, const Tensor& bias, DType out_dtype);
  // x [M, K]: each row normalised by its own mean and biased variance, then scaled by weight [K]
  // and shifted by bias [K] (either may be undefined); writes each row's mean and
  // 1/sqrt(var + eps).
  void (*layer_norm)(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                     const Tensor& out, const Tensor& mean, const Tensor& invstd);
  // Whether batch_norm_apply and batch_norm_backward take relu (the CPU's and the GPU's); a device
  // without it runs batch_norm_relu as relu(batch_norm(x)).
  bool fuses_relu;
  // Whether batch norm's kernels read and write 16-bit activations as they are (the CPU's and the
  // GPU's), which saves a conversion pass each way under autocast.
  bool takes_half;

  static const NormalizationKernels cpu;
  static const NormalizationKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
