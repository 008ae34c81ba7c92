// The losses: nll_loss, cross_entropy (with class weights, ignore_index and label smoothing, as
// torch.nn.functional's) and mse_loss.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

enum class Reduction { none, mean, sum };

// log_probs [N, C] (or [N, C, d...]) and i64 class indices [N] (or [N, d...]).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight = Tensor(),
                int64_t ignore_index = -100, Reduction reduction = Reduction::mean);
// log_softmax over dim 1 then nll_loss, with label smoothing as torch.nn.functional.cross_entropy.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                     int64_t ignore_index = -100, Reduction reduction = Reduction::mean,
                     double label_smoothing = 0.0);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

}  // namespace kiln
