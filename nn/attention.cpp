#include "kiln/nn/attention.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/nn/init.h"
#include "kiln/ops/attention.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/rearrange.h"

namespace kiln::nn {
namespace {

const char* py_bool(bool b) {
  return b ? "True" : "False";
}

// A bool mask (true: may not attend) as the float one PyTorch 1.13 makes of it: -inf there, 0
// elsewhere; a float mask as it is.
Tensor additive(const Tensor& mask, DType dtype, const char* what) {
  if (mask.dtype() != DType::boolean) {
    KILN_CHECK(mask.dtype() == dtype, DTypeError,
               "MultiheadAttention: {} must be bool or the inputs' dtype {}, got {}", what,
               dtype_name(dtype), dtype_name(mask.dtype()));
    return mask;
  }
  return masked_fill(zeros(mask.shape(), dtype, mask.device()), mask,
                     -std::numeric_limits<double>::infinity());
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads,
                                       MultiheadAttentionOptions options)
    : embed_dim_(embed_dim), num_heads_(num_heads), options_(options) {
  KILN_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, ValueError,
             "MultiheadAttention: embed_dim must be a positive multiple of num_heads, got "
             "embed_dim {} and num_heads {}",
             embed_dim, num_heads);
  KILN_CHECK(options.dropout >= 0.0 && options.dropout <= 1.0, ValueError,
             "MultiheadAttention: dropout must be in [0, 1], got {}", options.dropout);
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}));
  init::xavier_uniform_(in_proj_weight);
  if (options.bias) in_proj_bias = register_parameter("in_proj_bias", zeros({3 * embed_dim}));
  out_proj =
      register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, options.bias));
  if (options.bias) init::zeros_(out_proj->bias);
}

std::string MultiheadAttention::extra_repr() const {
  return fmt::format("embed_dim={}, num_heads={}, dropout={}, bias={}, batch_first={}", embed_dim_,
                     num_heads_, options_.dropout, py_bool(in_proj_bias.defined()),
                     py_bool(options_.batch_first));
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  return forward(x, x, x, {.need_weights = false}).output;
}

AttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                            const Tensor& value, const AttentionMasks& masks) {
  KILN_CHECK(query.defined() && key.defined() && value.defined(), ValueError,
             "MultiheadAttention: query, key and value must be defined tensors");
  const bool batched = query.dim() == 3;
  KILN_CHECK(
      (query.dim() == 2 || batched) && key.dim() == query.dim() && value.dim() == query.dim(),
      ShapeError,
      "MultiheadAttention: expected query, key and value of 3 dims ({}) or 2 (unbatched "
      "[L, E]), got {}, {} and {}",
      options_.batch_first ? "[N, L, E], batch_first" : "[L, N, E]", shape_str(query.shape()),
      shape_str(key.shape()), shape_str(value.shape()));
  KILN_CHECK(
      query.size(-1) == embed_dim_ && key.size(-1) == embed_dim_ && value.size(-1) == embed_dim_,
      ShapeError,
      "MultiheadAttention: query, key and value must end in embed_dim {}, got {}, {} and {}",
      embed_dim_, shape_str(query.shape()), shape_str(key.shape()), shape_str(value.shape()));
  // [N, L, E] from here on.
  auto batch_major = [&](const Tensor& t) {
    if (!batched) return t.unsqueeze(0);
    return options_.batch_first ? t : t.transpose(0, 1).contiguous();
  };
  const Tensor q_in = batch_major(query), k_in = batch_major(key), v_in = batch_major(value);
  const int64_t N = q_in.size(0), L = q_in.size(1), S = k_in.size(1);
  const int64_t H = num_heads_, head_dim = embed_dim_ / num_heads_;
  KILN_CHECK(k_in.size(0) == N && v_in.size(0) == N && v_in.size(1) == S, ShapeError,
             "MultiheadAttention: key and value must have the query's batch and one length, got "
             "query {}, key {} and value {}",
             shape_str(query.shape()), shape_str(key.shape()), shape_str(value.shape()));
  auto project = [&](const Tensor& x, int64_t part, int64_t length) {
    const Tensor w = in_proj_weight.narrow(0, part * embed_dim_, embed_dim_);
    const Tensor b =
        in_proj_bias.defined() ? in_proj_bias.narrow(0, part * embed_dim_, embed_dim_) : Tensor();
    return linear(x, w, b).view({N, length, H, head_dim}).transpose(1, 2);  // [N, H, len, hd]
  };
  // PyTorch 1.13 divides q by sqrt(head_dim) before the product; so does kiln, for its rounding.
  const Tensor q = div(project(q_in, 0, L), std::sqrt(static_cast<double>(head_dim)));
  const Tensor k = project(k_in, 1, S), v = project(v_in, 2, S);

  Tensor mask;
  if (masks.attn_mask.defined()) {
    const Tensor& m = masks.attn_mask;
    const bool per_head = m.dim() == 3 && m.size(0) == N * H && m.size(1) == L && m.size(2) == S;
    KILN_CHECK((m.dim() == 2 && m.size(0) == L && m.size(1) == S) || per_head, ShapeError,
               "MultiheadAttention: attn_mask must be [L, S] = [{}, {}] or [N * num_heads, L, S] "
               "= [{}, {}, {}], got {}",
               L, S, N * H, L, S, shape_str(m.shape()));
    mask = additive(m, q.dtype(), "attn_mask");
    if (per_head) mask = mask.reshape({N, H, L, S});
  }
  if (masks.key_padding_mask.defined()) {
    const Tensor& m = masks.key_padding_mask;
    const Shape want = batched ? Shape{N, S} : Shape{S};
    KILN_CHECK(m.shape() == want, ShapeError,
               "MultiheadAttention: key_padding_mask must be {} (batch, key length), got {}",
               shape_str(want), shape_str(m.shape()));
    const Tensor padding = additive(m, q.dtype(), "key_padding_mask").reshape({N, 1, 1, S});
    mask = mask.defined() ? add(mask, padding) : padding;
  }
  if (masks.is_causal && mask.defined()) {
    // Causal and another mask: the causal one joins it as -inf above the diagonal.
    const Tensor causal =
        triu(full({L, S}, -std::numeric_limits<double>::infinity(), q.dtype(), q.device()), 1);
    mask = add(mask, causal);
  }
  const double p = is_training() ? options_.dropout : 0.0;
  // Without need_weights the weights are never formed: the fused kernels take the call where
  // they can (ops/attention.h), as PyTorch's fast path.
  const AttentionOptions attention{.attn_mask = mask,
                                   .dropout_p = p,
                                   .is_causal = masks.is_causal && !mask.defined(),
                                   .scale = 1.0};
  AttentionResult attended =
      masks.need_weights ? scaled_dot_product_attention_with_weights(q, k, v, attention)
                         : AttentionResult{scaled_dot_product_attention(q, k, v, attention), {}};
  Tensor out = (*out_proj)(attended.output.transpose(1, 2).reshape({N, L, embed_dim_}));
  if (!batched)
    out = out.view({L, embed_dim_});
  else if (!options_.batch_first)
    out = out.transpose(0, 1);
  AttentionOutput result{out, Tensor()};
  if (masks.need_weights) {
    Tensor w = masks.average_attn_weights ? attended.weights.mean({1}) : attended.weights;
    result.weights = batched ? w : w.squeeze(0);
  }
  return result;
}

Tensor MultiheadAttention::forward_many(const std::vector<Tensor>& inputs) {
  if (inputs.size() == 1) return forward(inputs[0]);
  expect_inputs(inputs, 3);
  return forward(inputs[0], inputs[1], inputs[2], {.need_weights = false}).output;
}

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                                                 TransformerEncoderLayerOptions options)
    : options_(options) {
  KILN_CHECK(options.activation == "relu" || options.activation == "gelu", ValueError,
             "TransformerEncoderLayer: activation must be \"relu\" or \"gelu\", got \"{}\"",
             options.activation);
  KILN_CHECK(options.dim_feedforward > 0, ValueError,
             "TransformerEncoderLayer: dim_feedforward must be positive, got {}",
             options.dim_feedforward);
  self_attn = register_module("self_attn",
                              std::make_shared<MultiheadAttention>(
                                  d_model, nhead,
                                  MultiheadAttentionOptions{.dropout = options.dropout,
                                                            .batch_first = options.batch_first}));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model));
  norm1 = register_module(
      "norm1",
      std::make_shared<LayerNorm>(Shape{d_model}, LayerNormOptions{.eps = options.layer_norm_eps}));
  norm2 = register_module(
      "norm2",
      std::make_shared<LayerNorm>(Shape{d_model}, LayerNormOptions{.eps = options.layer_norm_eps}));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const EncoderMasks& masks) {
  auto attend = [&](const Tensor& x) {
    return (*dropout1)(self_attn
                           ->forward(x, x, x,
                                     {.key_padding_mask = masks.src_key_padding_mask,
                                      .need_weights = false,
                                      .attn_mask = masks.mask,
                                      .is_causal = masks.is_causal})
                           .output);
  };
  auto feed_forward = [&](const Tensor& x) {
    const Tensor h = (*linear1)(x);
    return (*dropout2)((*linear2)((*dropout)(options_.activation == "relu" ? relu(h) : gelu(h))));
  };
  if (options_.norm_first) {
    const Tensor x = add(src, attend((*norm1)(src)));
    return add(x, feed_forward((*norm2)(x)));
  }
  const Tensor x = (*norm1)(add(src, attend(src)));
  return (*norm2)(add(x, feed_forward(x)));
}

TransformerEncoder::TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                                       TransformerEncoderLayerOptions options, bool final_norm) {
  KILN_CHECK(num_layers > 0, ValueError, "TransformerEncoder: num_layers must be positive, got {}",
             num_layers);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i)
    layers->push_back(std::make_shared<TransformerEncoderLayer>(d_model, nhead, options));
  if (final_norm)
    norm = register_module(
        "norm", std::make_shared<LayerNorm>(Shape{d_model},
                                            LayerNormOptions{.eps = options.layer_norm_eps}));
}

Tensor TransformerEncoder::forward(const Tensor& src, const EncoderMasks& masks) {
  Tensor x = src;
  for (const auto& layer : *layers)
    x = std::static_pointer_cast<TransformerEncoderLayer>(layer)->forward(x, masks);
  return norm ? (*norm)(x) : x;
}

}  // namespace kiln::nn
