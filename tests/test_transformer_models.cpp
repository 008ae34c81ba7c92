// The transformer models against PyTorch 1.13 (tests/reference/transformer_models.json, made by
// make_transformer_models.py): nn::VisionTransformer and nn::GPT on the weights of torch.nn twins
// with the same parameter names, outputs and every gradient in f64; MultiheadAttention's
// is_causal against PyTorch's causal mask; multinomial's draws; generate.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
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

std::shared_ptr<nn::Module> model_for(const json& c) {
  const json& o = c.at("options");
  const std::string kind = c.at("kind");
  if (kind == "vit")
    return std::make_shared<nn::VisionTransformer>(
        nn::VisionTransformerOptions{.image_size = o.at("image"),
                                     .patch_size = o.at("patch"),
                                     .in_channels = o.at("channels"),
                                     .num_classes = o.at("classes"),
                                     .dim = o.at("dim"),
                                     .depth = o.at("depth"),
                                     .heads = o.at("heads"),
                                     .mlp_dim = o.at("mlp")});
  if (kind == "gpt")
    return std::make_shared<nn::GPT>(nn::GPTOptions{.vocab_size = o.at("vocab"),
                                                    .context = o.at("context"),
                                                    .dim = o.at("dim"),
                                                    .depth = o.at("depth"),
                                                    .heads = o.at("heads")});
  return std::make_shared<nn::MultiheadAttention>(
      o.at("embed_dim"), o.at("heads"), nn::MultiheadAttentionOptions{.batch_first = true});
}

}  // namespace

TEST_CASE("ViT and GPT equal their PyTorch 1.13 twins: outputs and gradients") {
  const json reference = torch_reference("transformer_models.json");
  for (const json& c : reference.at("cases")) {
    const std::string kind = c.at("kind");
    INFO(kind);
    auto model = model_for(c);
    model->to(DType::f64);
    nn::StateDict state;
    for (const auto& [name, t] : c.at("state_dict").items()) state[name] = tensor_of(t);
    REQUIRE(model->state_dict().size() == state.size());
    model->load_state_dict(state);
    std::map<std::string, Tensor> inputs;
    for (const auto& [name, t] : c.at("inputs").items())
      inputs[name] = name == "tokens" ? tensor_of(t).to(DType::i64) : tensor_of(t).requires_grad_();
    Tensor out;
    if (kind == "mha_causal") {
      const Tensor& x = inputs["x"];
      out = dynamic_cast<nn::MultiheadAttention&>(*model)
                .forward(x, x, x,
                         {.key_padding_mask = tensor_of(c.at("key_padding_mask")),
                          .need_weights = false,
                          .is_causal = true})
                .output;
    } else {
      out = (*model)(kind == "gpt" ? inputs["tokens"] : inputs["images"]);
    }
    REQUIRE(out.shape() == shape_of(c.at("output").at("shape")));
    check_against_torch(out, doubles(c.at("output").at("values")), 1e-11);
    check_gradients_against_torch(c, out, inputs, model->named_parameters(), 1e-10);
  }
}

TEST_CASE("make_vit: sizes by name and patches by image side; bad shapes refused") {
  auto mini = nn::make_vit("vit-mini", {.num_classes = 10, .in_channels = 1, .image_size = 28});
  CHECK(mini->options().patch_size == 4);
  CHECK(mini->pos_embedding.shape() == Shape{1, 50, 64});
  CHECK(mini->state_dict().count("encoder.layers.3.self_attn.in_proj_weight") == 1);
  CHECK((*mini)(randn({2, 1, 28, 28})).shape() == Shape{2, 10});
  CHECK(nn::make_vit("vit-tiny", {.image_size = 224})->options().patch_size == 16);
  CHECK(nn::is_vit_name("vit-base"));
  CHECK_FALSE(nn::is_vit_name("resnet20"));
  CHECK_THROWS_WITH(nn::make_vit("vit-huge", {}), Contains("unknown model 'vit-huge'"));
  CHECK_THROWS_WITH(nn::make_vit("vit-mini", {.image_size = 30}),
                    Contains("patches of 4 pixels") && Contains("30"));
  CHECK_THROWS_WITH((*mini)(randn({2, 1, 32, 32})),
                    Contains("VisionTransformer: expected images [N, 1, 28, 28]"));
}

TEST_CASE("MultiheadAttention is_causal joins an attn_mask as PyTorch's combined mask") {
  manual_seed(3);
  nn::MultiheadAttention mha(8, 2, {.batch_first = true});
  const Tensor x = randn({2, 5, 8});
  const Tensor causal = triu(ones({5, 5}, DType::boolean), 1);
  const Tensor extra = randn({5, 5});
  const Tensor combined =
      add(extra, masked_fill(zeros({5, 5}), causal, -std::numeric_limits<double>::infinity()));
  const Tensor want = mha.forward(x, x, x, {.need_weights = false, .attn_mask = combined}).output;
  const Tensor got =
      mha.forward(x, x, x, {.need_weights = false, .attn_mask = extra, .is_causal = true}).output;
  CHECK(allclose(got, want, 1e-5, 1e-6));
  // The weights' path (composed) agrees with the fused one.
  const nn::AttentionOutput weighted = mha.forward(x, x, x, {.is_causal = true});
  CHECK(allclose(weighted.output,
                 mha.forward(x, x, x, {.need_weights = false, .is_causal = true}).output, 1e-5,
                 1e-6));
  CHECK(weighted.weights.narrow(1, 0, 1).narrow(2, 1, 4).abs().sum().item() == 0.0);
}

TEST_CASE("multinomial draws each category at its probability; with and without replacement") {
  Generator generator(11);
  const Tensor probs = tensor({0.1, 0.0, 0.6, 0.3});
  const Tensor draws = multinomial(probs, 20000, true, &generator);
  CHECK(draws.dtype() == DType::i64);
  CHECK(draws.shape() == Shape{20000});
  const std::vector<double> want = {0.1, 0.0, 0.6, 0.3};
  for (int64_t c = 0; c < 4; ++c) {
    const double share = eq(draws, static_cast<double>(c)).to(DType::f64).mean().item();
    INFO("category " << c << " share " << share);
    // 5 standard deviations of a binomial share over 20000 draws.
    CHECK(std::abs(share - want[static_cast<size_t>(c)]) <=
          5.0 * std::sqrt(want[static_cast<size_t>(c)] * (1 - want[static_cast<size_t>(c)]) /
                          20000.0));
  }
  // Unnormalised weights, rows apart; without replacement every row is a permutation of its
  // non-zero categories.
  const Tensor weights = tensor({{2.0, 1.0, 0.0, 1.0}, {0.0, 5.0, 3.0, 0.5}});
  const Tensor picks = multinomial(weights, 3, false, &generator);
  CHECK(picks.shape() == Shape{2, 3});
  CHECK(equal(sort(picks, 1).values, tensor({{0, 1, 3}, {1, 2, 3}})));
  Generator again(11);
  CHECK(equal(multinomial(probs, 20000, true, &again), draws));
  CHECK_THROWS_WITH(multinomial(tensor({0.5, -0.1}), 1), Contains("non-negative"));
  CHECK_THROWS_WITH(multinomial(tensor({0.0, 0.0}), 1), Contains("sums to 0"));
  CHECK_THROWS_WITH(multinomial(tensor({0.5, 0.0, 0.5}), 3, false),
                    Contains("2 non-zero probabilities"));
  CHECK_THROWS_WITH(multinomial(ones({2, 2, 2}), 1), Contains("[C] or [N, C]"));
  CHECK_THROWS_WITH(multinomial(ones({3}, DType::i64), 1), Contains("floating"));
}

TEST_CASE("GPT: causal (a later token changes no earlier logit) and generate extends a prompt") {
  manual_seed(5);
  nn::GPT gpt({.vocab_size = 13, .context = 8, .dim = 16, .depth = 2, .heads = 2});
  const Tensor a = tensor({{1, 2, 3, 4, 5}});
  const Tensor b = tensor({{1, 2, 3, 4, 9}});
  const Tensor la = gpt(a), lb = gpt(b);
  CHECK(allclose(la.narrow(1, 0, 4), lb.narrow(1, 0, 4), 1e-6, 1e-6));
  CHECK_FALSE(allclose(la.narrow(1, 4, 1), lb.narrow(1, 4, 1), 1e-6, 1e-6));
  CHECK_THROWS_WITH(gpt(ones({1, 9}, DType::i64)), Contains("1 <= T <= context 8"));

  Generator generator(1);
  const Tensor prompt = tensor({7, 3});
  const Tensor text = nn::generate(gpt, prompt, 12, {.top_k = 3, .generator = &generator});
  CHECK(text.shape() == Shape{1, 14});  // longer than the context: the window slides
  CHECK(equal(text.narrow(1, 0, 2), prompt.unsqueeze(0)));
  CHECK(gpt.is_training());
  Generator same(1);
  CHECK(equal(nn::generate(gpt, prompt, 12, {.top_k = 3, .generator = &same}), text));
  // top_k 1 is greedy: each token the argmax of the logits before it.
  const Tensor greedy = nn::generate(gpt, prompt, 3, {.top_k = 1});
  gpt.eval();
  const Tensor logits = gpt(greedy.narrow(1, 0, 4));
  CHECK(equal(logits.argmax(-1).narrow(1, 1, 3), greedy.narrow(1, 2, 3)));
  CHECK_THROWS_WITH(nn::generate(gpt, prompt, 1, {.temperature = 0.0}), Contains("temperature"));
}

TEST_CASE("ViT with what CNNs get: checkpointed blocks, bf16 autocast, channels-last images") {
  manual_seed(9);
  auto vit = nn::make_vit("vit-mini", {.num_classes = 4, .in_channels = 3, .image_size = 16});
  const Tensor images = randn({3, 3, 16, 16});
  const Tensor labels = tensor({0, 3, 1});
  auto grads = [&] {
    std::vector<Tensor> g;
    for (const Tensor& p : vit->parameters()) g.push_back(p.grad().clone());
    vit->zero_grad();
    return g;
  };
  cross_entropy((*vit)(images), labels).backward();
  const std::vector<Tensor> plain = grads();

  // Each encoder layer checkpointed: its activations recomputed in backward, the same gradients.
  const Tensor patches = vit->conv_proj->forward(images).flatten(2).transpose(1, 2);
  Tensor x = add(cat({vit->class_token.expand({3, 1, 64}), patches}, 1), vit->pos_embedding);
  for (const auto& layer : *vit->encoder->layers)
    x = checkpoint([&](const Tensor& in) { return (*layer)(in); }, x);
  cross_entropy((*vit->head)((*vit->encoder->norm)(x).select(1, 0)), labels).backward();
  const std::vector<Tensor> checkpointed = grads();
  REQUIRE(checkpointed.size() == plain.size());
  for (size_t i = 0; i < plain.size(); ++i) CHECK(allclose(checkpointed[i], plain[i], 1e-5, 1e-6));

  // Channels-last images give the same logits; under bf16 autocast the logits are bf16's
  // rounding of the f32 ones.
  const Tensor logits = (*vit)(images);
  CHECK(allclose((*vit)(images.to(MemoryFormat::channels_last)), logits, 1e-5, 1e-6));
  Tensor mixed;
  {
    autocast bf16(DType::bf16);
    mixed = (*vit)(images);
  }
  CHECK(mixed.dtype() == DType::bf16);
  CHECK(allclose(mixed.to(DType::f32), logits, 0.1, 0.1));
}

TEST_CASE("scaled_dot_product_attention under autocast runs in its 16-bit dtype, fused") {
  manual_seed(13);
  const Tensor q = randn({2, 3, 9, 8}), k = randn({2, 3, 11, 8}), v = randn({2, 3, 11, 8});
  const Tensor mask = randn({9, 11});
  Tensor mixed;
  {
    autocast bf16(DType::bf16);
    mixed = scaled_dot_product_attention(q, k, v, {.attn_mask = mask});
  }
  CHECK(mixed.dtype() == DType::bf16);
  const Tensor by_hand = scaled_dot_product_attention(
      q.to(DType::bf16), k.to(DType::bf16), v.to(DType::bf16), {.attn_mask = mask.to(DType::bf16)});
  CHECK(equal(mixed, by_hand));
  CHECK(allclose(mixed.to(DType::f32), scaled_dot_product_attention(q, k, v, {.attn_mask = mask}),
                 0.05, 0.05));
}
