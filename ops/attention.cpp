#include "kiln/ops/attention.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/autocast.h"
#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/backends.h"
#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/kernels/attention.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/autograd/grad.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/dropout.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/softmax.h"

namespace kiln {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  KILN_CHECK(q.defined() && k.defined() && v.defined(), ValueError,
             "{}: query, key and value must be defined tensors", kOp);
  KILN_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, ShapeError,
             "{}: expected query [..., L, E], key [..., S, E] and value [..., S, Ev] of 2 or more "
             "dims, got {}, {} and {}",
             kOp, shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  KILN_CHECK(q.size(-1) == k.size(-1), ShapeError,
             "{}: query and key must end in the same embedding size E, got {} and {}", kOp,
             shape_str(q.shape()), shape_str(k.shape()));
  KILN_CHECK(k.size(-2) == v.size(-2), ShapeError,
             "{}: key and value must have the same length S (dim -2), got {} and {}", kOp,
             shape_str(k.shape()), shape_str(v.shape()));
  KILN_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), DTypeError,
             "{}: query, key and value must have one dtype, got {}, {} and {}", kOp,
             dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  KILN_CHECK(is_floating(q.dtype()), DTypeError, "{}: expected floating-point inputs, got {}", kOp,
             dtype_name(q.dtype()));
  KILN_CHECK(o.dropout_p >= 0.0 && o.dropout_p <= 1.0, ValueError,
             "{}: dropout_p must be in [0, 1], got {}", kOp, o.dropout_p);
  KILN_CHECK(!o.scale || std::isfinite(*o.scale), ValueError, "{}: scale must be finite, got {}",
             kOp, o.scale.value_or(0.0));
  KILN_CHECK(!(o.is_causal && o.attn_mask.defined()), ValueError,
             "{}: give attn_mask or is_causal, not both (as PyTorch)", kOp);
  if (o.attn_mask.defined())
    KILN_CHECK(o.attn_mask.dtype() == DType::boolean || o.attn_mask.dtype() == q.dtype(),
               DTypeError, "{}: attn_mask must be bool or the inputs' dtype {}, got {}", kOp,
               dtype_name(q.dtype()), dtype_name(o.attn_mask.dtype()));
}

}  // namespace

AttentionResult scaled_dot_product_attention_with_weights(const Tensor& query, const Tensor& key,
                                                          const Tensor& value,
                                                          const AttentionOptions& options) {
  check_inputs(query, key, value, options);
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(-1))));
  Tensor scores = mul(matmul(query, key.transpose(-2, -1)), scale);
  const double minus_inf = -std::numeric_limits<double>::infinity();
  if (options.is_causal) {
    const int64_t L = query.size(-2), S = key.size(-2);
    const Tensor cols = arange(S, DType::i64, query.device()).unsqueeze(0);
    const Tensor rows = arange(L, DType::i64, query.device()).unsqueeze(1);
    scores = masked_fill(scores, gt(cols, rows), minus_inf);
  } else if (options.attn_mask.defined()) {
    const Tensor& mask = options.attn_mask;
    scores = mask.dtype() == DType::boolean ? masked_fill(scores, logical_not(mask), minus_inf)
                                            : add(scores, mask);
  }
  Tensor weights = softmax(scores, -1);
  if (options.dropout_p > 0.0) weights = dropout(weights, options.dropout_p, true);
  return {matmul(weights, value), weights};
}

namespace {

// The fused kernels' operands: [B, L, E] views of the inputs, contiguous in the compute dtype (f32
// for 16-bit inputs, which the kernels accumulate in).
struct FusedOperands {
  Tensor q, k, v, mask;
  Shape lead;  // the leading dims B stands for
  DType compute = DType::f32;
};

FusedOperands fused_operands(const Tensor& query, const Tensor& key, const Tensor& value,
                             const AttentionOptions& options) {
  FusedOperands f;
  f.compute = query.dtype() == DType::f64 ? DType::f64 : DType::f32;
  f.lead = Shape(query.shape().begin(), query.shape().end() - 2);
  auto flat = [&](const Tensor& t) {
    return t.detach().to(f.compute).contiguous().reshape({-1, t.size(-2), t.size(-1)});
  };
  f.q = flat(query), f.k = flat(key), f.v = flat(value);
  if (options.attn_mask.defined()) {
    const Tensor& m = options.attn_mask;
    Tensor additive =
        m.dtype() == DType::boolean
            ? where(m, zeros({}, f.compute, m.device()),
                    full({}, -std::numeric_limits<double>::infinity(), f.compute, m.device()))
            : m.detach().to(f.compute);
    Shape full_shape = f.lead;
    full_shape.push_back(query.size(-2));
    full_shape.push_back(key.size(-2));
    // A view where the broadcast dims merge ([L, S] masks, causal-style ones); else a copy.
    f.mask = additive.expand(full_shape).reshape({-1, query.size(-2), key.size(-2)});
  }
  return f;
}

// The fused kernels' backward. Under create_graph it differentiates the composition again from
// the saved inputs, so attention keeps double backward.
struct FusedAttentionBackward : Node {
  SavedTensor query, key, value, out, lse;
  AttentionOptions options;
  double scale = 1.0;
  std::string name() const override { return "FusedAttentionBackward"; }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor q = query.unpack(*this), k = key.unpack(*this), v = value.unpack(*this);
    if (GradMode::is_enabled()) return recomposed(q, k, v, g);
    const FusedOperands f = fused_operands(q, k, v, options);
    const Tensor o = out.unpack(*this), l = lse.unpack(*this);
    const Tensor dout = g.detach().to(f.compute).contiguous().reshape(o.shape());
    Tensor dq = empty(f.q.shape(), f.compute, q.device());
    Tensor dk = empty(f.k.shape(), f.compute, q.device());
    Tensor dv = empty(f.v.shape(), f.compute, q.device());
    kernels_for<AttentionKernels>(kOp, q.device())
        .backward(f.q, f.k, f.v, f.mask, options.is_causal, scale, o, l, dout, dq, dk, dv);
    auto shaped = [](const Tensor& grad, const Tensor& like) {
      return grad.view(like.shape()).to(like.dtype());
    };
    return {next_edges[0].valid() ? shaped(dq, q) : Tensor(),
            next_edges[1].valid() ? shaped(dk, k) : Tensor(),
            next_edges[2].valid() ? shaped(dv, v) : Tensor()};
  }
  std::vector<Tensor> recomposed(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& g) {
    std::vector<Tensor> wanted;
    for (const Tensor* t : {&q, &k, &v})
      if (t->requires_grad()) wanted.push_back(*t);
    const Tensor o = scaled_dot_product_attention_with_weights(q, k, v, options).output;
    const std::vector<Tensor> grads =
        autograd::grad({o}, wanted, {g}, {.create_graph = true, .allow_unused = true});
    std::vector<Tensor> out_grads;
    size_t next = 0;
    for (const Tensor* t : {&q, &k, &v})
      out_grads.push_back(t->requires_grad() ? grads[next++] : Tensor());
    return out_grads;
  }
  void release_saved() override {
    query.reset(), key.reset(), value.reset(), out.reset(), lse.reset();
    options.attn_mask = Tensor();
  }
};

// Whether the fused kernels take this call: a device that has them, no dropout, no autocast (the
// entry point cast the operands and suspended it; scaled_dot_product_attention_with_weights'
// composition casts op by op), one batch shape for query, key and value, a mask that needs no
// gradient.
bool fusable(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  if (kernels_for<AttentionKernels>(kOp, q.device()).forward == nullptr) return false;
  if (o.dropout_p > 0.0 || is_autocast_enabled()) return false;
  const Shape lead(q.shape().begin(), q.shape().end() - 2);
  if (Shape(k.shape().begin(), k.shape().end() - 2) != lead ||
      Shape(v.shape().begin(), v.shape().end() - 2) != lead)
    return false;
  if (o.attn_mask.defined() && o.attn_mask.requires_grad()) return false;
  return backends::fused_attention_enabled();
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const AttentionOptions& options) {
  // As PyTorch 2's autocast lists: the attention runs in the scope's 16-bit dtype (a float mask
  // with it), fused where it can, with autocast suspended inside.
  if (AutocastArgs cast{kOp, {&query, &key, &value, &options.attn_mask}}) {
    AttentionOptions inner = options;
    inner.attn_mask = cast[3];
    return scaled_dot_product_attention(cast[0], cast[1], cast[2], inner);
  }
  check_inputs(query, key, value, options);
  if (!fusable(query, key, value, options))
    return scaled_dot_product_attention_with_weights(query, key, value, options).output;
  profiler::OpScope profile(kOp, {&query, &key, &value});
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(-1))));
  const FusedOperands f = fused_operands(query, key, value, options);
  const Tensor out = empty({f.q.size(0), f.q.size(1), f.v.size(2)}, f.compute, query.device());
  const Tensor lse = empty({f.q.size(0), f.q.size(1)}, f.compute, query.device());
  kernels_for<AttentionKernels>(kOp, query.device())
      .forward(f.q, f.k, f.v, f.mask, options.is_causal, scale, out, lse);
  Shape out_shape = f.lead;
  out_shape.push_back(query.size(-2));
  out_shape.push_back(value.size(-1));
  Tensor result = out.view(out_shape).to(query.dtype());
  if (should_record({&query, &key, &value})) {
    auto node = std::make_shared<FusedAttentionBackward>();
    node->query = SavedTensor(query);
    node->key = SavedTensor(key);
    node->value = SavedTensor(value);
    node->out = SavedTensor(out);
    node->lse = SavedTensor(lse);
    node->options = options;
    node->scale = scale;
    record(result, node, {&query, &key, &value});
  }
  return result;
}

}  // namespace kiln
