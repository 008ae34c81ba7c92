// The normalisation family: batch norm and layer norm on every device
// (kernels/cpu/normalization.cpp, kernels/cuda/normalization.cu). Inputs arrive contiguous in f32
// or f64; where takes_half is set, batch norm's activations may also be f16 or bf16, with the
// statistics, weight, bias and per-channel sums in f32 (ops/normalization.cpp converts the 16-bit
// floats to f32 for the other devices). The CPU accumulates batch norm's statistics in double, two
// passes; the GPU in their own dtype (f32 for the 16-bit floats) with Welford's update, combined
// across blocks in a fixed order.
//
// Batch norm comes in two shapes of table. The CPU's runs three entries (batch_norm_stats, then
// batch_norm_apply, and batch_norm_backward), with the running statistics and 1/sqrt(var + eps)
// left to the op. The GPU's runs one pass each way (batch_norm_forward_pass,
// batch_norm_backward_pass): two launches per direction that also update the running statistics
// and take x in either layout (BatchNormLayout). A table has one shape or the other; the other's
// entries are null. Both fuse the residual add + ReLU that ends a ResNet block.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

// Where channel c's values sit in the x that batch norm's passes read and write.
enum class BatchNormLayout : std::uint8_t {
  channels_first,  // x [N, C, S] contiguous: NCHW with S = H * W, or [N, C] as [N, C, 1]
  channels_last,   // x [M, C] contiguous, C fastest: NHWC with M = N * H * W
};

// One forward of batch norm. x, residual and out have x's layout and dtype (f32, f64, f16 or
// bf16); the per-channel tensors are [C] in P, x's dtype or f32 for the 16-bit floats.
//   training: mean and biased variance of x over everything but C (0 and 0 when that is empty);
//     where running_mean and running_var are given and the batch is not empty, they become
//     (1 - momentum) * running + momentum * batch, the variance unbiased (times M / (M - 1)).
//   inference: running_mean and running_var (both required) are the statistics.
//   out = (x - mean) * invstd * weight + bias, invstd = 1 / sqrt(var + eps); weight and bias may
//     be undefined (1 and 0). relu: out = max(that, 0). residual (relu must be set): out =
//     max(that + residual, 0), the end of a ResNet block. y is formed in P, rounded to x's dtype
//     once.
//   mean and invstd, when defined, receive the statistics used, in the very bits the
//     normalisation used, for the backward.
//   num_batches_tracked, when defined (an i64 scalar, nn::BatchNorm's count of batches), gets 1
//     added in the same launch.
struct BatchNormForwardPass {
  Tensor x;
  BatchNormLayout layout = BatchNormLayout::channels_first;
  Tensor weight, bias, running_mean, running_var, residual, num_batches_tracked;
  bool training = true;
  bool relu = false;
  double momentum = 0.1;
  double eps = 1e-5;
  Tensor out, mean, invstd;
};

// One backward of batch norm, from grad (x's layout and dtype) and the forward's x, mean, invstd
// and weight. The gradient that reaches batch norm's output is grad where the forward's ReLU
// passed, which the pass learns from one of:
//   output defined (the forward had a residual): the forward's out as stored; grad passes where
//     !(out <= 0), NaN included, as relu's backward reads its output;
//   relu (no output): the forward's y worked out again from x, mean, invstd, weight and bias with
//     the forward's own expression and rounding, so the mask is bit for bit the forward's;
//   neither: all of grad.
// Writes, each when defined: sum_g = Σ g and sum_g_xhat = Σ g * x_hat per channel (bias's and
// weight's gradients), grad_x (training: w * invstd / M * (M * g - sum_g - x_hat * sum_g_xhat),
// the batch statistics depending on every x; inference: g * w * invstd) and grad_residual = g.
struct BatchNormBackwardPass {
  Tensor x, grad;
  BatchNormLayout layout = BatchNormLayout::channels_first;
  Tensor mean, invstd, weight, bias, output;
  bool training = true;
  bool relu = false;
  Tensor grad_x, grad_residual, sum_g, sum_g_xhat;
};

struct NormalizationKernels {
  // x [N, C, S]: per channel, mean and biased variance over N and S (0 and 0 when N * S is 0).
  void (*batch_norm_stats)(const Tensor& x, const Tensor& mean, const Tensor& var);
  // out[n, c, s] = (x[n, c, s] - mean[c]) * invstd[c] * weight[c] + bias[c]; weight and bias may
  // be undefined (1 and 0). With relu (only where fuses_relu), out = max(that, 0) in the same
  // pass; with a residual as well (x's shape and dtype; undefined for none), out = max(that +
  // residual, 0), the end of a ResNet block, formed in the statistics' dtype and rounded to x's
  // once.
  void (*batch_norm_apply)(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                           const Tensor& weight, const Tensor& bias, const Tensor& out, bool relu,
                           const Tensor& residual);
  // The whole of batch norm's backward in two passes over x and grad (contiguous [N, C, S]): the
  // per-channel sums sum_g = Σ g and sum_g_xhat = Σ g * x_hat over N and S, then, when grad_x is
  // defined, dx = w * invstd / M * (M * g - sum_g - x_hat * sum_g_xhat) in training (the batch
  // statistics depend on every x) or dx = g * w * invstd in inference. weight may be undefined
  // (1). With relu (only where fuses_relu), the backward of relu(batch_norm(x)): g counts only
  // where the forward's output was positive, worked out again from x, the statistics, weight and
  // bias with the very expression batch_norm_apply used, so the mask is bit for bit the forward's,
  // and taken after rounding to out_dtype, the dtype the op's output is stored in (x's, or the
  // 16-bit float x was widened from): a y that rounds to 0 there passes no gradient, as PyTorch's
  // relu backward reads the stored output. With output defined instead (the forward had a
  // residual; relu is then false), g counts where !(output <= 0), NaN included, read from the
  // forward's output as stored, and grad_residual, when defined, receives that g.
  void (*batch_norm_backward)(const Tensor& x, const Tensor& grad, const Tensor& mean,
                              const Tensor& invstd, const Tensor& weight, bool training,
                              const Tensor& grad_x, const Tensor& sum_g, const Tensor& sum_g_xhat,
                              bool relu, const Tensor& bias, DType out_dtype, const Tensor& output,
                              const Tensor& grad_residual);
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
  // The GPU's batch norm, one pass each way (see the top of the file); null on the CPU, whose
  // three entries above run instead.
  void (*batch_norm_forward_pass)(const BatchNormForwardPass& pass) = nullptr;
  void (*batch_norm_backward_pass)(const BatchNormBackwardPass& pass) = nullptr;

  static const NormalizationKernels cpu;
  static const NormalizationKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
