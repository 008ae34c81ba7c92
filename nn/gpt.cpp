#include "kiln/nn/gpt.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/nn/init.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"
#include "kiln/ops/sampling.h"
#include "kiln/ops/softmax.h"
#include "kiln/ops/sort.h"

namespace kiln::nn {

GPT::GPT(GPTOptions options) : options_(options) {
  const GPTOptions& o = options;
  KILN_CHECK(o.vocab_size > 0 && o.context > 0 && o.depth > 0, ValueError,
             "GPT: vocab_size, context and depth must be positive, got {}, {} and {}", o.vocab_size,
             o.context, o.depth);
  tok_embedding =
      register_module("tok_embedding", std::make_shared<Embedding>(o.vocab_size, o.dim));
  pos_embedding = register_module("pos_embedding", std::make_shared<Embedding>(o.context, o.dim));
  init::normal_(tok_embedding->weight, 0.0, 0.02);
  init::normal_(pos_embedding->weight, 0.0, 0.02);
  encoder =
      register_module("encoder", std::make_shared<TransformerEncoder>(
                                     o.dim, o.heads, o.depth,
                                     TransformerEncoderLayerOptions{.dim_feedforward = 4 * o.dim,
                                                                    .dropout = o.dropout,
                                                                    .activation = "gelu",
                                                                    .batch_first = true,
                                                                    .norm_first = true},
                                     /*final_norm=*/true));
  head = register_module("head", std::make_shared<Linear>(o.dim, o.vocab_size, /*bias=*/false));
}

Tensor GPT::forward(const Tensor& tokens) {
  KILN_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1 && tokens.size(1) <= options_.context,
             ShapeError, "GPT: expected tokens [N, T] with 1 <= T <= context {}, got {}",
             options_.context, shape_str(tokens.shape()));
  const Tensor positions = arange(tokens.size(1), DType::i64, tokens.device());
  const Tensor x = add((*tok_embedding)(tokens), (*pos_embedding)(positions));
  return (*head)(encoder->forward(x, EncoderMasks{.is_causal = true}));
}

Tensor generate(GPT& model, const Tensor& prompt, int64_t new_tokens,
                const GenerateOptions& options) {
  KILN_CHECK(
      prompt.defined() && is_integral(prompt.dtype()) &&
          (prompt.dim() == 1 || (prompt.dim() == 2 && prompt.size(0) == 1)) && prompt.numel() >= 1,
      ValueError, "generate: expected an integer prompt [T] or [1, T] with T >= 1, got {} {}",
      prompt.defined() ? dtype_name(prompt.dtype()) : "undefined",
      prompt.defined() ? shape_str(prompt.shape()) : "");
  KILN_CHECK(new_tokens >= 0, ValueError, "generate: new_tokens must be >= 0, got {}", new_tokens);
  KILN_CHECK(options.temperature > 0.0, ValueError, "generate: temperature must be > 0, got {}",
             options.temperature);
  KILN_CHECK(options.top_k >= 0, ValueError, "generate: top_k must be >= 0, got {}", options.top_k);
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  Tensor sequence = prompt.reshape({1, prompt.numel()}).to(DType::i64);
  const int64_t context = model.options().context;
  for (int64_t i = 0; i < new_tokens; ++i) {
    const int64_t length = sequence.size(1);
    const Tensor window =
        length > context ? sequence.narrow(1, length - context, context) : sequence;
    Tensor logits = div(model(window).select(1, window.size(1) - 1), options.temperature);
    if (options.top_k > 0 && options.top_k < logits.size(-1)) {
      const Tensor kth = topk(logits, options.top_k).values.narrow(-1, options.top_k - 1, 1);
      logits = masked_fill(logits, lt(logits, kth), -std::numeric_limits<double>::infinity());
    }
    const Tensor next = multinomial(softmax(logits, -1), 1, false, options.generator);
    sequence = cat({sequence, next}, 1);
  }
  if (was_training) model.train();
  return sequence;
}

}  // namespace kiln::nn
