// A small GPT (Radford et al. 2018/2019): token and learned position embeddings, a pre-norm causal
// TransformerEncoder with GELU, a final LayerNorm and a linear head over the vocabulary.
//
//   nn::GPT gpt({.vocab_size = 256, .context = 64, .dim = 128, .depth = 4, .heads = 4});
//   Tensor logits = gpt(tokens);  // i64 [N, T], T <= context -> [N, T, vocab_size]
//   Tensor more = nn::generate(gpt, prompt, 100, {.temperature = 0.8, .top_k = 20});
//
// Parameter names: tok_embedding.weight, pos_embedding.weight, encoder.layers.N..., encoder.norm,
// head.weight; apps/gpt's gpt_torch.py builds the same model from torch.nn and loads its weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/core/generator.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct GPTOptions {
  int64_t vocab_size = 256;
  int64_t context = 128;  // the longest sequence a forward takes
  int64_t dim = 128;
  int64_t depth = 4;
  int64_t heads = 4;
  double dropout = 0.0;
};

class GPT : public Module {
 public:
  explicit GPT(GPTOptions options);
  Tensor forward(const Tensor& tokens) override;
  std::string name() const override { return "GPT"; }
  const GPTOptions& options() const { return options_; }

  std::shared_ptr<Embedding> tok_embedding, pos_embedding;
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<Linear> head;

 private:
  GPTOptions options_;
};

struct GenerateOptions {
  double temperature = 1.0;  // > 0; the logits are divided by it
  int64_t top_k = 0;         // > 0: sample among the k likeliest tokens only
  Generator* generator = nullptr;
};

// prompt (i64 [T] or [1, T], T >= 1) followed by new_tokens sampled one at a time, each from the
// model's distribution over the last `context` tokens; the model runs in eval mode without grad.
Tensor generate(GPT& model, const Tensor& prompt, int64_t new_tokens,
                const GenerateOptions& options = {});

}  // namespace kiln::nn
