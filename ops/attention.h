// Scaled dot-product attention, as PyTorch 2.x's torch.nn.functional.scaled_dot_product_attention:
//
//   out = softmax(q kᵀ · scale + mask) v       q [..., L, E], k [..., S, E], v [..., S, Ev]
//
// fused where the device's attention kernels take the call (kernels/attention.h: the CPU's take
// every dtype, mask, length and dropout; a GPU's only what a lab route sends them), never
// storing the L x S scores; composed of kiln's matmul, softmax and dropout otherwise, storing
// them as PyTorch's "math" backend. Under autocast it runs in the scope's 16-bit dtype. Fused or
// composed, dropout draws the same mask from the default generator (one offset, the composition's
// dropout(weights, p)), so after one manual_seed both give the same result, to rounding; in a
// CUDA graph it is refused, as dropout is.
//
//   Tensor out = scaled_dot_product_attention(q, k, v, {.is_causal = true});
#pragma once

#include <optional>

#include "kiln/core/tensor.h"

namespace kiln {

struct AttentionOptions {
  // Broadcast to [..., L, S]: a bool mask says which scores take part (true: attends, PyTorch 2's
  // meaning), a float mask is added to the scores (-inf removes one).
  Tensor attn_mask = {};
  double dropout_p = 0.0;  // on the attention weights, training or not: pass 0 to evaluate
  bool is_causal = false;  // query i attends keys 0..i (top-left aligned when L != S)
  std::optional<double> scale = std::nullopt;  // 1 / sqrt(E) when not given
};

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const AttentionOptions& options = {});

// The output and the attention weights softmax(...) after dropout, [..., L, S]: what
// nn::MultiheadAttention returns with need_weights.
struct AttentionResult {
  Tensor output, weights;
};
AttentionResult scaled_dot_product_attention_with_weights(const Tensor& query, const Tensor& key,
                                                          const Tensor& value,
                                                          const AttentionOptions& options = {});

}  // namespace kiln
