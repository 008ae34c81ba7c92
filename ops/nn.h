// The ops neural-network layers are made of: softmax and losses, convolution and pooling,
// normalisation, dropout.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/core/tensor.h"

namespace kiln {

// A window's two sizes, height then width. One integer means both, as in PyTorch:
// max_pool2d(x, 2) and conv2d(x, w, b, /*stride=*/2) take Pair{2} == Pair{2, 2}.
struct Pair : std::array<int64_t, 2> {
  Pair() : std::array<int64_t, 2>{0, 0} {}
  Pair(int64_t both) : std::array<int64_t, 2>{both, both} {}  // NOLINT: implicit, as PyTorch's int
  Pair(int64_t height, int64_t width) : std::array<int64_t, 2>{height, width} {}
};

enum class Reduction { none, mean, sum };

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);  // max-subtracted, stable

// log_probs [N, C] (or [N, C, d...]) and i64 class indices [N] (or [N, d...]).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight = Tensor(),
                int64_t ignore_index = -100, Reduction reduction = Reduction::mean);
// log_softmax over dim 1 then nll_loss, with label smoothing as torch.nn.functional.cross_entropy.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                     int64_t ignore_index = -100, Reduction reduction = Reduction::mean,
                     double label_smoothing = 0.0);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

// x [N, C, H, W], weight [O, C/groups, kH, kW], bias [O] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              Pair stride = {1, 1}, Pair padding = {0, 0}, Pair dilation = {1, 1},
              int64_t groups = 1);
// stride {0, 0} means stride = kernel_size, as PyTorch's default.
Tensor max_pool2d(const Tensor& x, Pair kernel_size, Pair stride = {0, 0}, Pair padding = {0, 0},
                  Pair dilation = {1, 1}, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& x, Pair kernel_size, Pair stride = {0, 0}, Pair padding = {0, 0},
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size);

// x [N, C, ...]. In training, normalises with the batch statistics and, if running stats are
// given, updates them in place: running = (1 - momentum) * running + momentum * batch (the
// running variance takes the unbiased batch variance). In inference, uses the running stats.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);
// relu(batch_norm(...)), the pair after most convolutions of a ResNet. On the CPU the ReLU runs
// inside batch norm's passes, forward and backward, saving a pass over the activations each way
// and the tensor between them; on the GPU it is the two ops.
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training,
                       double momentum = 0.1, double eps = 1e-5);
// Normalises over the trailing dims given by normalized_shape; weight/bias of that shape or
// undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// Zeroes each element with probability p and scales the rest by 1/(1-p); identity when not
// training. The mask comes from the Philox stream, so it is the same on CPU and GPU.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true,
               Generator* generator = nullptr);

}  // namespace kiln
