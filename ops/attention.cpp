#include "kiln/ops/attention.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/autocast.h"
#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/backends.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/core/error.h"
#include "kiln/core/generator.h"
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

namespace {

// The composition, its dropout drawn from `generator` (the default one when null).
AttentionResult composed(const Tensor& query, const Tensor& key, const Tensor& value,
                         const AttentionOptions& options, Generator* generator) {
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
  if (options.dropout_p > 0.0) weights = dropout(weights, options.dropout_p, true, generator);
  return {matmul(weights, value), weights};
}

}  // namespace

AttentionResult scaled_dot_product_attention_with_weights(const Tensor& query, const Tensor& key,
                                                          const Tensor& value,
                                                          const AttentionOptions& options) {
  check_inputs(query, key, value, options);
  return composed(query, key, value, options, nullptr);
}

namespace {

DType compute_dtype(DType input) {
  return input == DType::f64 ? DType::f64 : DType::f32;
}

// The fused kernels' operands: [B, L, E] views of the inputs, contiguous in the compute dtype (f32
// for 16-bit inputs, which the kernels accumulate in), or in `operand`, the dtype the kernel table
// asked for (a tensor-core kernel reads 16-bit inputs as they are).
struct FusedOperands {
  Tensor q, k, v, mask;
  Shape lead;  // the leading dims B stands for
  DType compute = DType::f32;
};

FusedOperands fused_operands(const Tensor& query, const Tensor& key, const Tensor& value,
                             const AttentionOptions& options,
                             std::optional<DType> operand = std::nullopt) {
  FusedOperands f;
  f.compute = compute_dtype(query.dtype());
  f.lead = Shape(query.shape().begin(), query.shape().end() - 2);
  const DType read = operand.value_or(f.compute);
  auto flat = [&](const Tensor& t) {
    return t.detach().to(read).contiguous().reshape({-1, t.size(-2), t.size(-1)});
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

// The fused kernels' backward, with the forward's dropout drawn again from its seed and offset.
// Under create_graph it differentiates the composition again from the saved inputs, its dropout
// drawn from a generator at the same seed and offset, so attention keeps double backward.
struct FusedAttentionBackward : Node {
  SavedTensor query, key, value, out, lse;
  AttentionOptions options;
  double scale = 1.0;
  AttentionDropout dropout;
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
        .backward(f.q, f.k, f.v, f.mask, options.is_causal, scale, dropout, o, l, dout, dq, dk, dv);
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
    // The forward's mask: the composition's dropout draws (seed, offset) for the same weights.
    Generator replay;
    replay.set_state({.seed = dropout.seed, .offset = dropout.offset});
    const Tensor o = composed(q, k, v, options, &replay).output;
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

// Whether a mask broadcasts to the scores [lead..., L, S] without widening them.
bool mask_fits(const Tensor& mask, const Shape& lead, int64_t L, int64_t S) {
  Shape scores = lead;
  scores.push_back(L);
  scores.push_back(S);
  if (mask.dim() > static_cast<int64_t>(scores.size())) return false;
  const size_t skip = scores.size() - static_cast<size_t>(mask.dim());
  for (int64_t i = 0; i < mask.dim(); ++i) {
    const int64_t size = mask.size(i);
    if (size != 1 && size != scores[skip + static_cast<size_t>(i)]) return false;
  }
  return true;
}

// Whether the fused kernels take this call, and the dtype they read the operands in (nullopt: the
// op composes): a device that has them, dropout below 1 (p = 1 zeroes everything, and the
// composition draws nothing for it), no autocast (the entry point cast the operands and suspended
// it; scaled_dot_product_attention_with_weights' composition casts op by op), one batch shape for
// query, key and value, a mask that needs no gradient and does not widen the scores, and what the
// device's table takes (the GPU's: what a lab route sends it, kernels/cuda/lab_routes.h).
std::optional<DType> fusable(const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionOptions& o) {
  const auto kernels = kernels_for<AttentionKernels>(kOp, q.device());
  if (kernels.forward == nullptr || !backends::fused_attention_enabled()) return std::nullopt;
  if (o.dropout_p >= 1.0 || is_autocast_enabled()) return std::nullopt;
  const Shape lead(q.shape().begin(), q.shape().end() - 2);
  if (Shape(k.shape().begin(), k.shape().end() - 2) != lead ||
      Shape(v.shape().begin(), v.shape().end() - 2) != lead)
    return std::nullopt;
  if (o.attn_mask.defined() &&
      (o.attn_mask.requires_grad() || !mask_fits(o.attn_mask, lead, q.size(-2), k.size(-2))))
    return std::nullopt;
  if (kernels.takes == nullptr) return compute_dtype(q.dtype());
  return kernels.takes(q, k, v, o.attn_mask.defined(), o.dropout_p > 0.0);
}

// Why a graph cannot hold the fused kernels' dropout: ops/dropout.cpp's reason (kiln does not
// register generator state with graphs, so the offset would be frozen into the graph).
constexpr const char* kRandomInGraph =
    "draws random numbers on the GPU (dropout_p > 0), and a graph would repeat the same draw at "
    "every replay (the generator's offset would be frozen into it; kiln does not register "
    "generator state with graphs as PyTorch does): pass dropout_p = 0 or run it outside the "
    "graph,";

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
  const std::optional<DType> operand = fusable(query, key, value, options);
  if (!operand) return scaled_dot_product_attention_with_weights(query, key, value, options).output;
  profiler::OpScope profile(kOp, {&query, &key, &value});
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(-1))));
  // The draw dropout(weights, p) of the composition would make: one offset of the default
  // generator, refused in a CUDA graph as ops/dropout.cpp refuses it.
  AttentionDropout drop;
  if (options.dropout_p > 0.0) {
    if (query.device().is_cuda() && cuda::is_current_stream_capturing(query.device().index))
      cuda::check_not_capturing(kRandomInGraph);
    Generator& gen = default_generator();
    drop = {.p = options.dropout_p, .seed = gen.seed(), .offset = gen.next_offset()};
  }
  const FusedOperands f = fused_operands(query, key, value, options, operand);
  const Tensor out = empty({f.q.size(0), f.q.size(1), f.v.size(2)}, f.compute, query.device());
  const Tensor lse = empty({f.q.size(0), f.q.size(1)}, f.compute, query.device());
  kernels_for<AttentionKernels>(kOp, query.device())
      .forward(f.q, f.k, f.v, f.mask, options.is_causal, scale, drop, out, lse);
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
    node->dropout = drop;
    record(result, node, {&query, &key, &value});
  }
  return result;
}

}  // namespace kiln
