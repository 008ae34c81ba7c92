// The losses: nll_loss, cross_entropy (with class weights, ignore_index and label smoothing, as
// torch.nn.functional's), mse_loss, and the pointwise ones of ops/loss_pointwise.cpp: l1_loss,
// smooth_l1_loss, huber_loss, binary_cross_entropy(_with_logits), kl_div and cosine_embedding_loss,
// each PyTorch 1.13's formula composed of elementwise ops (their gradients are the composition's).
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

// batchmean: kl_div only (the sum over the batch's size, which KL divergence's maths means).
enum class Reduction { none, mean, sum, batchmean };

// log_probs [N, C] (or [N, C, d...]) and i64 class indices [N] (or [N, d...]).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight = Tensor(),
                int64_t ignore_index = -100, Reduction reduction = Reduction::mean);
// log_softmax over dim 1 then nll_loss, with label smoothing as torch.nn.functional.cross_entropy.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                     int64_t ignore_index = -100, Reduction reduction = Reduction::mean,
                     double label_smoothing = 0.0);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

// |input - target|.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta 0: l1_loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      Reduction reduction = Reduction::mean, double beta = 1.0);
// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta).
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                  double delta = 1.0);
// -w (y log x + (1 - y) log(1 - x)) for probabilities x in [0, 1], each log clamped at -100 as
// PyTorch's. Refused under autocast, as PyTorch refuses it: use the _with_logits form.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const Tensor& weight = Tensor(), Reduction reduction = Reduction::mean);
// binary_cross_entropy(sigmoid(logits), target) computed stably from the logits; pos_weight
// [C] weighs the positive term per class (broadcast over the last dim).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const Tensor& weight = Tensor(),
                                        Reduction reduction = Reduction::mean,
                                        const Tensor& pos_weight = Tensor());
// KL(target || input) with input log-probabilities: target (log target - input), 0 where
// target is 0; with log_target the target is log-probabilities too. Reduction::batchmean divides
// the sum by input.size(0), the mathematically right mean (PyTorch's mean divides by every
// element).
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
              bool log_target = false);
// For rows of input1 and input2 ([N, D], or [D] for one pair) and target [N] of 1 or -1:
// 1 - cos for target 1, max(0, cos - margin) for -1, as torch.nn.functional.cosine_embedding_loss
// (cos with 1e-12 added to each squared norm).
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                             double margin = 0.0, Reduction reduction = Reduction::mean);

}  // namespace kiln
