// Attention layers with PyTorch 1.13's names, semantics and state dicts, so weights move between
// kiln and torch.nn both ways: MultiheadAttention (in_proj_weight, in_proj_bias, out_proj),
// TransformerEncoderLayer (self_attn, linear1, linear2, norm1, norm2) and TransformerEncoder
// (layers.N..., norm). The attention is ops/attention.h's: fused (scores never stored) where it
// applies and the weights are not asked for, composed otherwise.
//
//   nn::MultiheadAttention mha(64, 8, {.batch_first = true});
//   auto [out, weights] = mha.forward(x, x, x, {.key_padding_mask = padding});
//   nn::TransformerEncoder encoder(64, 8, 6, {.dim_feedforward = 256, .batch_first = true});
//   Tensor y = encoder.forward(x, {.is_causal = true});
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;      // on the attention weights, in training
  bool bias = true;          // in_proj_bias and out_proj.bias
  bool batch_first = false;  // [N, L, E] rather than PyTorch's default [L, N, E]
};

// The masks of one call, with PyTorch 1.13's MultiheadAttention meanings (the opposite of
// scaled_dot_product_attention's for bool masks): true means "may not attend".
struct AttentionMasks {
  // [N, S] (or [S] unbatched): true, or -inf added, for keys to ignore (padding).
  Tensor key_padding_mask = {};
  bool need_weights = true;
  // [L, S] or [N * num_heads, L, S]: true (or -inf added) where query i may not attend key j.
  Tensor attn_mask = {};
  bool average_attn_weights = true;  // weights [N, L, S] averaged over heads, else [N, H, L, S]
  // Query i attends keys 0..i only (PyTorch 2's is_causal), added to any attn_mask.
  bool is_causal = false;
};

struct AttentionOutput {
  Tensor output;   // [L, N, E] ([N, L, E] batch_first; [L, E] unbatched)
  Tensor weights;  // undefined unless need_weights
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  // Self-attention of x with no mask, the output alone (so a Sequential can hold it).
  Tensor forward(const Tensor& x) override;
  // mha({query, key, value}): the output, without masks or weights, with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override;
  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const AttentionMasks& masks = {});
  std::string name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;

  Tensor in_proj_weight, in_proj_bias;  // [3E, E] and [3E]: the q, k and v projections stacked
  std::shared_ptr<Linear> out_proj;

 private:
  int64_t embed_dim_, num_heads_;
  MultiheadAttentionOptions options_;
};

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;  // pre-norm (x + attn(norm(x))) rather than post-norm
};

struct EncoderMasks {
  Tensor mask = {};                  // attn_mask of the self-attention
  Tensor src_key_padding_mask = {};  // its key_padding_mask
  bool is_causal = false;            // each position attends itself and those before it
};

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                          TransformerEncoderLayerOptions options = {});
  Tensor forward(const Tensor& src) override { return forward(src, EncoderMasks{}); }
  Tensor forward(const Tensor& src, const EncoderMasks& masks);
  std::string name() const override { return "TransformerEncoderLayer"; }

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  TransformerEncoderLayerOptions options_;
};

// num_layers TransformerEncoderLayers, each with weights of its own, and a final LayerNorm when
// final_norm (PyTorch's `norm` argument, which pre-norm stacks use).
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                     TransformerEncoderLayerOptions options = {}, bool final_norm = false);
  Tensor forward(const Tensor& src) override { return forward(src, EncoderMasks{}); }
  Tensor forward(const Tensor& src, const EncoderMasks& masks);
  std::string name() const override { return "TransformerEncoder"; }

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // null without final_norm
};

}  // namespace kiln::nn
