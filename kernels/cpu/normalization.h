// CPU normalisation kernels. Inputs arrive contiguous in f32 or f64 (ops/normalization.cpp
// converts the 16-bit floats); statistics accumulate in double and are stored in x's dtype.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::cpu {

// x [N, C, S]: per channel, mean and biased variance over N and S (0 and 0 when N * S is 0).
void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var);
// out[n, c, s] = (x[n, c, s] - mean[c]) * invstd[c] * weight[c] + bias[c]; weight and bias may be
// undefined (1 and 0). With relu, out = max(that, 0) in the same pass (batch_norm_relu; the GPU
// kernels have no such flag, and the op composes batch_norm and relu there).
void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& out,
                      bool relu = false);
// The whole of batch norm's backward in two passes over x and grad (contiguous [N, C, S]): the
// per-channel sums sum_g = Σ g and sum_g_xhat = Σ g * x_hat over N and S, then, when grad_x is
// defined, dx = w * invstd / M * (M * g - sum_g - x_hat * sum_g_xhat) in training (the batch
// statistics depend on every x) or dx = g * w * invstd in inference. weight may be undefined (1).
// With relu, the backward of relu(batch_norm(x)): g counts only where the forward's output was
// positive, worked out again from x, the statistics, weight and bias (which is then needed) with
// the very expression batch_norm_apply used; kiln compiles as ISO C++ (no FMA contraction), so
// the mask is bit for bit the forward's.
void batch_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, bool training,
                         const Tensor& grad_x, const Tensor& sum_g, const Tensor& sum_g_xhat,
                         bool relu = false, const Tensor& bias = Tensor());

// x [M, K]: each row normalised by its own mean and biased variance, then scaled by weight [K]
// and shifted by bias [K] (either may be undefined); writes each row's mean and 1/sqrt(var + eps).
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                const Tensor& out, const Tensor& mean, const Tensor& invstd);

}  // namespace kiln::cpu
