// Batch norm (with batch_norm_relu, the pair after most convolutions of a ResNet), layer norm, and
// group and instance norm (ops/group_norm.cpp).
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

// x [N, C, ...]. In training, normalises with the batch statistics and, if running stats are
// given, updates them in place: running = (1 - momentum) * running + momentum * batch (the
// running variance takes the unbiased batch variance). In inference, uses the running stats.
// num_batches_tracked, when given (an i64 scalar: nn::BatchNorm's count), gets 1 added, on the GPU
// in batch norm's own launch rather than one of its own.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5, const Tensor& num_batches_tracked = Tensor());
// relu(batch_norm(...)). Where the device's kernels fuse it (the CPU's and the GPU's), the ReLU
// runs inside batch norm's passes, forward and backward, saving a pass over the activations each
// way and the tensor between them; elsewhere it is the two ops.
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training,
                       double momentum = 0.1, double eps = 1e-5,
                       const Tensor& num_batches_tracked = Tensor());
// relu(batch_norm(x, ...) + residual), the end of a ResNet block; residual has x's shape. Where
// the device's kernels fuse it (the CPU's and the GPU's), one pass each way: the backward finds
// where the ReLU passed from the output, as relu's does. Elsewhere (a residual of another dtype) it
// is the three ops, in f32 for the 16-bit floats and rounded once at the end as the fused pass.
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& running_mean,
                           const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                           bool training, double momentum = 0.1, double eps = 1e-5,
                           const Tensor& num_batches_tracked = Tensor());
// Normalises over the trailing dims given by normalized_shape; weight/bias of that shape or
// undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// x [N, C, ...] normalised over each group of C / num_groups channels and all positions, then
// times weight [C] plus bias [C] (either undefined: none), as torch.nn.functional.group_norm.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// x [N, C, ...] normalised per sample and channel, as torch.nn.functional.instance_norm: with
// use_input_stats, the input's statistics, and the running ones (when defined) move towards their
// mean over the batch by momentum; without, the running statistics.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, bool use_input_stats,
                     double momentum = 0.1, double eps = 1e-5);

}  // namespace kiln
