#include "kiln/nn/transformer.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/nn/init.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/rearrange.h"

namespace kiln::nn {
namespace {

std::shared_ptr<LayerNorm> layer_norm(int64_t d_model, double eps) {
  return std::make_shared<LayerNorm>(Shape{d_model}, LayerNormOptions{.eps = eps});
}

}  // namespace

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead,
                                                 TransformerDecoderLayerOptions options)
    : options_(options) {
  KILN_CHECK(options.activation == "relu" || options.activation == "gelu", ValueError,
             "TransformerDecoderLayer: activation must be \"relu\" or \"gelu\", got \"{}\"",
             options.activation);
  KILN_CHECK(options.dim_feedforward > 0, ValueError,
             "TransformerDecoderLayer: dim_feedforward must be positive, got {}",
             options.dim_feedforward);
  const MultiheadAttentionOptions attention{.dropout = options.dropout,
                                            .batch_first = options.batch_first};
  self_attn =
      register_module("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead, attention));
  multihead_attn = register_module("multihead_attn",
                                   std::make_shared<MultiheadAttention>(d_model, nhead, attention));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model));
  norm1 = register_module("norm1", layer_norm(d_model, options.layer_norm_eps));
  norm2 = register_module("norm2", layer_norm(d_model, options.layer_norm_eps));
  norm3 = register_module("norm3", layer_norm(d_model, options.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerDecoderLayer::forward_many(const std::vector<Tensor>& inputs) {
  expect_inputs(inputs, 2);
  return forward(inputs[0], inputs[1]);
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const DecoderMasks& masks) {
  KILN_CHECK(tgt.defined() && memory.defined(), ValueError,
             "TransformerDecoderLayer: tgt and memory must be defined tensors");
  auto self_block = [&](const Tensor& x) {
    return (*dropout1)(self_attn
                           ->forward(x, x, x,
                                     {.key_padding_mask = masks.tgt_key_padding_mask,
                                      .need_weights = false,
                                      .attn_mask = masks.tgt_mask,
                                      .is_causal = masks.tgt_is_causal})
                           .output);
  };
  auto memory_block = [&](const Tensor& x) {
    return (*dropout2)(multihead_attn
                           ->forward(x, memory, memory,
                                     {.key_padding_mask = masks.memory_key_padding_mask,
                                      .need_weights = false,
                                      .attn_mask = masks.memory_mask,
                                      .is_causal = masks.memory_is_causal})
                           .output);
  };
  auto feed_forward = [&](const Tensor& x) {
    const Tensor h = (*linear1)(x);
    return (*dropout3)((*linear2)((*dropout)(options_.activation == "relu" ? relu(h) : gelu(h))));
  };
  if (options_.norm_first) {
    Tensor x = add(tgt, self_block((*norm1)(tgt)));
    x = add(x, memory_block((*norm2)(x)));
    return add(x, feed_forward((*norm3)(x)));
  }
  Tensor x = (*norm1)(add(tgt, self_block(tgt)));
  x = (*norm2)(add(x, memory_block(x)));
  return (*norm3)(add(x, feed_forward(x)));
}

TransformerDecoder::TransformerDecoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                                       TransformerDecoderLayerOptions options, bool final_norm) {
  KILN_CHECK(num_layers > 0, ValueError, "TransformerDecoder: num_layers must be positive, got {}",
             num_layers);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i)
    layers->push_back(std::make_shared<TransformerDecoderLayer>(d_model, nhead, options));
  if (final_norm) norm = register_module("norm", layer_norm(d_model, options.layer_norm_eps));
}

Tensor TransformerDecoder::forward_many(const std::vector<Tensor>& inputs) {
  expect_inputs(inputs, 2);
  return forward(inputs[0], inputs[1]);
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory,
                                   const DecoderMasks& masks) {
  Tensor x = tgt;
  for (const auto& layer : *layers)
    x = std::static_pointer_cast<TransformerDecoderLayer>(layer)->forward(x, memory, masks);
  return norm ? (*norm)(x) : x;
}

Transformer::Transformer(int64_t d_model, int64_t nhead, TransformerOptions options)
    : d_model_(d_model), batch_first_(options.layer.batch_first) {
  encoder = register_module(
      "encoder", std::make_shared<TransformerEncoder>(d_model, nhead, options.num_encoder_layers,
                                                      options.layer, /*final_norm=*/true));
  decoder = register_module(
      "decoder", std::make_shared<TransformerDecoder>(d_model, nhead, options.num_decoder_layers,
                                                      options.layer, /*final_norm=*/true));
  for (Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor Transformer::forward_many(const std::vector<Tensor>& inputs) {
  expect_inputs(inputs, 2);
  return forward(inputs[0], inputs[1]);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const TransformerMasks& masks) {
  KILN_CHECK(src.defined() && tgt.defined(), ValueError,
             "Transformer: src and tgt must be defined tensors");
  KILN_CHECK(src.dim() == tgt.dim() && (src.dim() == 2 || src.dim() == 3), ShapeError,
             "Transformer: src and tgt must both be {} or both unbatched [length, d_model], got "
             "{} and {}",
             batch_first_ ? "[N, length, d_model] (batch_first)" : "[length, N, d_model]",
             shape_str(src.shape()), shape_str(tgt.shape()));
  const int64_t batch_dim = batch_first_ ? 0 : 1;
  KILN_CHECK(src.dim() == 2 || src.size(batch_dim) == tgt.size(batch_dim), ShapeError,
             "Transformer: src and tgt must have one batch size, got {} and {}",
             shape_str(src.shape()), shape_str(tgt.shape()));
  KILN_CHECK(src.size(-1) == d_model_ && tgt.size(-1) == d_model_, ShapeError,
             "Transformer: src and tgt must end in d_model {}, got {} and {}", d_model_,
             shape_str(src.shape()), shape_str(tgt.shape()));
  const Tensor memory = encoder->forward(src, {.mask = masks.src_mask,
                                               .src_key_padding_mask = masks.src_key_padding_mask,
                                               .is_causal = masks.src_is_causal});
  return decoder->forward(tgt, memory,
                          {.tgt_mask = masks.tgt_mask,
                           .memory_mask = masks.memory_mask,
                           .tgt_key_padding_mask = masks.tgt_key_padding_mask,
                           .memory_key_padding_mask = masks.memory_key_padding_mask,
                           .tgt_is_causal = masks.tgt_is_causal,
                           .memory_is_causal = masks.memory_is_causal});
}

Tensor Transformer::generate_square_subsequent_mask(int64_t size, DType dtype, Device device) {
  KILN_CHECK(size > 0, ValueError,
             "Transformer::generate_square_subsequent_mask: size must be positive, got {}", size);
  return triu(full({size, size}, -std::numeric_limits<double>::infinity(), dtype, device), 1);
}

}  // namespace kiln::nn
