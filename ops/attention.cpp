#include "kiln/ops/attention.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "kiln/core/error.h"
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

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const AttentionOptions& options) {
  return scaled_dot_product_attention_with_weights(query, key, value, options).output;
}

}  // namespace kiln
