// Batch norm (with batch_norm_relu, the pair after most convolutions of a ResNet) and layer norm.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

// x [N, C, ...]. In training, normalises with the batch statistics and, if running stats are
// given, updates them in place: running = (1 - momentum) * running + momentum * batch (the
// running variance takes the unbiased batch variance). In inference, uses the running stats.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);
// relu(batch_norm(...)). Where the device's kernels fuse it (the CPU's and the GPU's), the ReLU
// runs inside batch norm's passes, forward and backward, saving a pass over the activations each
// way and the tensor between them; elsewhere it is the two ops.
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training,
                       double momentum = 0.1, double eps = 1e-5);
// Normalises over the trailing dims given by normalized_shape; weight/bias of that shape or
// undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace kiln
