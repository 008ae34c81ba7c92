// The decoder side of PyTorch 1.13's transformer modules, with its names, semantics and state
// dicts: TransformerDecoderLayer (self_attn, multihead_attn, linear1, linear2, norm1-3),
// TransformerDecoder (layers.N..., norm) and Transformer (encoder.layers.N..., encoder.norm,
// decoder.layers.N..., decoder.norm), so weights move between kiln and torch.nn both ways. The
// encoder side is nn/attention.h's; the masks mean what they mean there (a bool mask's true: may
// not attend).
//
//   nn::Transformer model(64, 4, {.num_encoder_layers = 2, .num_decoder_layers = 2,
//                                 .layer = {.dim_feedforward = 128, .batch_first = true}});
//   Tensor y = model.forward(src, tgt, {.tgt_is_causal = true});
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// A decoder layer takes the encoder layer's options (dim_feedforward, dropout, activation,
// layer_norm_eps, batch_first, norm_first), as PyTorch's constructors do.
using TransformerDecoderLayerOptions = TransformerEncoderLayerOptions;

struct DecoderMasks {
  Tensor tgt_mask = {};                 // attn_mask of the self-attention over tgt
  Tensor memory_mask = {};              // attn_mask of the attention over memory
  Tensor tgt_key_padding_mask = {};     // key_padding_mask of the self-attention
  Tensor memory_key_padding_mask = {};  // key_padding_mask of the attention over memory
  bool tgt_is_causal = false;           // PyTorch 2's: each target position sees those before it
  bool memory_is_causal = false;        // the same for memory (as long as tgt, as PyTorch's)
};

class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead,
                          TransformerDecoderLayerOptions options = {});
  using Module::forward;  // forward(x) alone: a NotImplementedError, a decoder needs memory
  // layer({tgt, memory}): no masks, with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override;
  Tensor forward(const Tensor& tgt, const Tensor& memory, const DecoderMasks& masks = {});
  std::string name() const override { return "TransformerDecoderLayer"; }

  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2, dropout3;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;

 private:
  TransformerDecoderLayerOptions options_;
};

// num_layers TransformerDecoderLayers, each with weights of its own, and a final LayerNorm when
// final_norm (PyTorch's `norm` argument).
class TransformerDecoder : public Module {
 public:
  TransformerDecoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                     TransformerDecoderLayerOptions options = {}, bool final_norm = false);
  using Module::forward;  // forward(x) alone: a NotImplementedError, a decoder needs memory
  Tensor forward_many(const std::vector<Tensor>& inputs) override;
  Tensor forward(const Tensor& tgt, const Tensor& memory, const DecoderMasks& masks = {});
  std::string name() const override { return "TransformerDecoder"; }

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // null without final_norm
};

struct TransformerOptions {
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
  TransformerEncoderLayerOptions layer = {};  // of every encoder and decoder layer
};

struct TransformerMasks {
  Tensor src_mask = {}, tgt_mask = {}, memory_mask = {};
  Tensor src_key_padding_mask = {}, tgt_key_padding_mask = {}, memory_key_padding_mask = {};
  bool src_is_causal = false, tgt_is_causal = false, memory_is_causal = false;
};

// torch.nn.Transformer: an encoder and a decoder, each ending in a LayerNorm, every parameter of
// two or more dims initialised by xavier_uniform_ as PyTorch's constructor does.
class Transformer : public Module {
 public:
  Transformer(int64_t d_model = 512, int64_t nhead = 8, TransformerOptions options = {});
  using Module::forward;  // forward(x) alone: a NotImplementedError, it takes src and tgt
  // model({src, tgt}): no masks, with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override;
  Tensor forward(const Tensor& src, const Tensor& tgt, const TransformerMasks& masks = {});
  std::string name() const override { return "Transformer"; }
  // [size, size]: -inf above the diagonal, 0 on and below it (PyTorch's float causal mask).
  static Tensor generate_square_subsequent_mask(int64_t size, DType dtype = DType::f32,
                                                Device device = Device::cpu());

  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;

 private:
  int64_t d_model_;
  bool batch_first_;
};

}  // namespace kiln::nn
