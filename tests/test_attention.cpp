// Attention against PyTorch 1.13: nn::MultiheadAttention, the transformer encoder and decoder
// layers and stacks, and nn::Transformer on the weights and inputs of
// tests/reference/attention.json (make_attention.py), outputs, attention weights and gradients in
// f64; state dicts both ways; scaled_dot_product_attention's masks against the plain formula.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "torch_reference.h"

using namespace kiln;
using Catch::Contains;
using kiln::testing::check_against_torch;
using kiln::testing::check_gradients_against_torch;
using kiln::testing::doubles;
using kiln::testing::shape_of;
using kiln::testing::tensor_of;
using kiln::testing::torch_reference;
using nlohmann::json;

namespace {

Tensor mask_of(const json& c, const char* name) {
  return c.at("masks").contains(name) ? tensor_of(c.at("masks").at(name)) : Tensor();
}

std::shared_ptr<nn::Module> module_for(const json& c) {
  const json& o = c.at("options");
  const std::string kind = c.at("kind");
  const int64_t E = 8;
  if (kind == "mha")
    return std::make_shared<nn::MultiheadAttention>(
        E, o.value("heads", 2),
        nn::MultiheadAttentionOptions{.bias = o.at("bias"), .batch_first = o.at("batch_first")});
  const nn::TransformerEncoderLayerOptions layer{.dim_feedforward = o.at("dim_feedforward"),
                                                 .dropout = 0.0,
                                                 .activation = o.at("activation"),
                                                 .batch_first = o.at("batch_first"),
                                                 .norm_first = o.at("norm_first")};
  if (kind == "encoder_layer") return std::make_shared<nn::TransformerEncoderLayer>(E, 2, layer);
  if (kind == "encoder")
    return std::make_shared<nn::TransformerEncoder>(E, 2, o.at("layers"), layer,
                                                    o.at("final_norm"));
  if (kind == "decoder_layer") return std::make_shared<nn::TransformerDecoderLayer>(E, 2, layer);
  if (kind == "decoder")
    return std::make_shared<nn::TransformerDecoder>(E, 2, o.at("layers"), layer,
                                                    o.at("final_norm"));
  REQUIRE(kind == "transformer");
  return std::make_shared<nn::Transformer>(
      E, 2,
      nn::TransformerOptions{.num_encoder_layers = o.at("encoder_layers"),
                             .num_decoder_layers = o.at("decoder_layers"),
                             .layer = layer});
}

Tensor run(nn::Module& m, const json& c, std::map<std::string, Tensor>& inputs, Tensor& weights) {
  const std::string kind = c.at("kind");
  if (kind == "mha") {
    auto& mha = dynamic_cast<nn::MultiheadAttention&>(m);
    const Tensor q = inputs.count("x") ? inputs["x"] : inputs["query"];
    const Tensor k = inputs.count("x") ? inputs["x"] : inputs["key"];
    const Tensor v = inputs.count("x") ? inputs["x"] : inputs["value"];
    nn::AttentionOutput out = mha.forward(q, k, v,
                                          {.key_padding_mask = mask_of(c, "key_padding_mask"),
                                           .attn_mask = mask_of(c, "attn_mask"),
                                           .average_attn_weights = c.at("options").at("average")});
    weights = out.weights;
    return out.output;
  }
  if (kind == "transformer") {
    // The target mask is the model's own, which must equal PyTorch's.
    const Tensor subsequent =
        nn::Transformer::generate_square_subsequent_mask(inputs["tgt"].size(1), DType::f64);
    REQUIRE(equal(subsequent, mask_of(c, "tgt_mask")));
    return dynamic_cast<nn::Transformer&>(m).forward(
        inputs["src"], inputs["tgt"],
        {.tgt_mask = subsequent,
         .src_key_padding_mask = mask_of(c, "src_key_padding_mask"),
         .memory_key_padding_mask = mask_of(c, "memory_key_padding_mask")});
  }
  if (kind == "decoder_layer" || kind == "decoder") {
    const nn::DecoderMasks masks{.tgt_mask = mask_of(c, "tgt_mask"),
                                 .memory_mask = mask_of(c, "memory_mask"),
                                 .tgt_key_padding_mask = mask_of(c, "tgt_key_padding_mask"),
                                 .memory_key_padding_mask = mask_of(c, "memory_key_padding_mask")};
    if (kind == "decoder_layer")
      return dynamic_cast<nn::TransformerDecoderLayer&>(m).forward(inputs["tgt"], inputs["memory"],
                                                                   masks);
    return dynamic_cast<nn::TransformerDecoder&>(m).forward(inputs["tgt"], inputs["memory"], masks);
  }
  const nn::EncoderMasks masks{.mask = mask_of(c, "mask"),
                               .src_key_padding_mask = mask_of(c, "src_key_padding_mask")};
  if (kind == "encoder_layer")
    return dynamic_cast<nn::TransformerEncoderLayer&>(m).forward(inputs["src"], masks);
  return dynamic_cast<nn::TransformerEncoder&>(m).forward(inputs["src"], masks);
}

}  // namespace

TEST_CASE("attention modules equal PyTorch 1.13's: outputs, weights and gradients") {
  const json reference = torch_reference("attention.json");
  for (const json& c : reference.at("cases")) {
    INFO(c.at("kind") << " " << c.at("options").dump());
    auto module = module_for(c);
    nn::StateDict state;
    for (const auto& [name, t] : c.at("state_dict").items()) state[name] = tensor_of(t);
    module->to(DType::f64);
    REQUIRE(module->state_dict().size() == state.size());
    module->load_state_dict(state);
    std::map<std::string, Tensor> inputs;
    for (const auto& [name, t] : c.at("inputs").items())
      inputs[name] = tensor_of(t).requires_grad_(true);
    Tensor weights;
    const Tensor out = run(*module, c, inputs, weights);
    REQUIRE(out.shape() == shape_of(c.at("output").at("shape")));
    check_against_torch(out, doubles(c.at("output").at("values")), 1e-12);
    if (c.contains("weights")) {
      REQUIRE(weights.shape() == shape_of(c.at("weights").at("shape")));
      check_against_torch(weights, doubles(c.at("weights").at("values")), 1e-12);
    }
    check_gradients_against_torch(c, out, inputs, module->named_parameters(), 1e-11);
  }
}

TEST_CASE("MultiheadAttention has PyTorch's state dict names and refuses bad shapes") {
  nn::MultiheadAttention mha(16, 4);
  std::vector<std::string> names;
  for (const auto& [name, t] : mha.state_dict()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"in_proj_bias", "in_proj_weight", "out_proj.bias",
                                          "out_proj.weight"});
  CHECK(mha.in_proj_weight.shape() == Shape{48, 16});
  CHECK_THROWS_WITH(nn::MultiheadAttention(10, 4), Contains("multiple of num_heads"));
  const Tensor x = randn({5, 2, 16});
  CHECK_THROWS_WITH(mha.forward(x, x, x, {.attn_mask = ones({4, 5}, DType::boolean)}),
                    Contains("attn_mask must be [L, S] = [5, 5]"));
  CHECK_THROWS_WITH(mha.forward(x, randn({5, 2, 8}), x), Contains("embed_dim 16"));
  CHECK(mha.forward(x).shape() == Shape{5, 2, 16});

  nn::TransformerEncoder encoder(16, 4, 3, {.dim_feedforward = 32}, true);
  const auto state = encoder.state_dict();
  CHECK(state.count("layers.2.self_attn.in_proj_weight") == 1);
  CHECK(state.count("layers.0.linear1.weight") == 1);
  CHECK(state.count("norm.weight") == 1);
  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(16, 4, {.activation = "tanh"}),
                    Contains("\"relu\" or \"gelu\""));
}

TEST_CASE("Transformer: PyTorch's state dict names, causal flags as masks, bad shapes refused") {
  manual_seed(3);
  nn::Transformer model(16, 4,
                        {.num_encoder_layers = 2,
                         .num_decoder_layers = 3,
                         .layer = {.dim_feedforward = 32, .dropout = 0.0, .batch_first = true}});
  const auto state = model.state_dict();
  for (const char* name :
       {"encoder.layers.1.self_attn.in_proj_weight", "encoder.norm.weight",
        "decoder.layers.2.multihead_attn.in_proj_weight", "decoder.layers.0.norm3.bias",
        "decoder.layers.1.multihead_attn.out_proj.weight", "decoder.norm.bias"})
    CHECK(state.count(name) == 1);
  CHECK(state.size() == 2 * 12 + 2 + 3 * 18 + 2);
  // Xavier-uniform, as PyTorch's constructor: |w| <= sqrt(6 / (fan_in + fan_out)).
  CHECK(model.decoder->layers->named_parameters().size() == 3 * 18);
  CHECK(state.at("decoder.layers.0.linear1.weight").abs().max().item() <=
        std::sqrt(6.0 / (16 + 32)));

  const Tensor src = randn({2, 7, 16}), tgt = randn({2, 5, 16});
  const Tensor flagged = model.forward(src, tgt, {.tgt_is_causal = true});
  const Tensor masked =
      model.forward(src, tgt, {.tgt_mask = nn::Transformer::generate_square_subsequent_mask(5)});
  CHECK(allclose(flagged, masked, 1e-5, 1e-6));
  CHECK(flagged.shape() == Shape{2, 5, 16});
  CHECK(model({src, tgt}).shape() == Shape{2, 5, 16});
  // A causal decoder: changing a later target position leaves the earlier outputs alone.
  Tensor changed = tgt.clone();
  changed.select(1, 4).fill_(3.0);
  const Tensor after = model.forward(src, changed, {.tgt_is_causal = true});
  CHECK(allclose(after.narrow(1, 0, 4), flagged.narrow(1, 0, 4), 1e-5, 1e-6));
  CHECK_FALSE(allclose(after.select(1, 4), flagged.select(1, 4)));

  // Under bf16 autocast the output is bf16's rounding of the f32 one, and gradients reach the
  // encoder's first layer through the decoder's attention over memory.
  Tensor mixed;
  {
    autocast bf16(DType::bf16);
    mixed = model.forward(src, tgt, {.tgt_is_causal = true});
  }
  CHECK(allclose(mixed.to(DType::f32), flagged, 0.1, 0.1));
  mixed.to(DType::f32).sum().backward();
  Tensor first;
  for (const auto& [name, p] : model.encoder->named_parameters())
    if (name == "layers.0.linear1.weight") first = p.grad();
  REQUIRE(first.defined());
  CHECK(first.abs().sum().item() > 0.0);

  CHECK_THROWS_WITH(model.forward(src, randn({3, 5, 16})), Contains("one batch size"));
  CHECK_THROWS_WITH(model.forward(src, randn({2, 5, 8})), Contains("d_model 16"));
  CHECK_THROWS_WITH(model.forward(src, randn({5, 16})), Contains("both unbatched"));
  CHECK_THROWS_WITH(model.decoder->forward_many({tgt}), Contains("TransformerDecoder"));
  CHECK_THROWS_WITH(nn::TransformerDecoderLayer(16, 4, {.activation = "tanh"}),
                    Contains("TransformerDecoderLayer") && Contains("\"relu\" or \"gelu\""));
}

TEST_CASE("scaled_dot_product_attention: masks, causal and scale as the plain formula") {
  manual_seed(7);
  const Tensor q = randn({2, 3, 4, 8}, DType::f64), k = randn({2, 3, 6, 8}, DType::f64);
  const Tensor v = randn({2, 3, 6, 5}, DType::f64);
  const Tensor scores = div(matmul(q, k.transpose(-2, -1)), std::sqrt(8.0));
  CHECK(allclose(scaled_dot_product_attention(q, k, v), matmul(softmax(scores, -1), v)));
  // Causal with L != S: query i sees keys 0..i (top-left aligned), as PyTorch 2.
  const Tensor causal = scaled_dot_product_attention(q, k, v, {.is_causal = true});
  const Tensor allowed = le(arange(6).unsqueeze(0), arange(4).unsqueeze(1));
  const Tensor manual = matmul(
      softmax(masked_fill(scores, logical_not(allowed), -std::numeric_limits<double>::infinity()),
              -1),
      v);
  CHECK(allclose(causal, manual));
  CHECK(allclose(scaled_dot_product_attention(q, k, v, {.attn_mask = allowed}), manual));
  const Tensor bias = randn({4, 6}, DType::f64);
  CHECK(allclose(scaled_dot_product_attention(q, k, v, {.attn_mask = bias, .scale = 0.5}),
                 matmul(softmax(add(mul(matmul(q, k.transpose(-2, -1)), 0.5), bias), -1), v)));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, randn({2, 3, 6, 7}, DType::f64), v),
                    Contains("scaled_dot_product_attention") && Contains("same embedding size"));
  CHECK_THROWS_WITH(
      scaled_dot_product_attention(q, k, v, {.attn_mask = allowed, .is_causal = true}),
      Contains("not both"));
  // Dropout: in eval pass 0; with p the weights' rows no longer sum to 1 but the mean holds.
  const AttentionResult dropped =
      scaled_dot_product_attention_with_weights(q, k, v, {.dropout_p = 0.5});
  CHECK(eq(dropped.weights, 0.0).to(DType::f64).mean().item() > 0.2);
}
