// Autocast's one policy table and the cast of an op's operands. The table follows PyTorch's CUDA
// autocast lists for the ops kiln has: the products and convolutions gain from tensor cores and
// lose nothing by rounding inputs whose sums accumulate in f32; softmax, the losses, sums and the
// transcendental functions need f32's range (exp overflows f16 at 11.1) or accumulate error.
// Batch norm is in neither list: it takes 16-bit activations with f32 weights and statistics.
#include "kiln/ops/autocast.h"

#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace kiln {

namespace {

struct PolicyRow {
  const char* op;
  CastPolicy policy;
};

constexpr PolicyRow kPolicy[] = {
    {"matmul", CastPolicy::lower_precision},
    {"mm", CastPolicy::lower_precision},
    {"bmm", CastPolicy::lower_precision},
    {"linear", CastPolicy::lower_precision},
    {"conv2d", CastPolicy::lower_precision},
    {"conv_transpose2d", CastPolicy::lower_precision},
    {"scaled_dot_product_attention", CastPolicy::lower_precision},
    {"softmax", CastPolicy::fp32},
    {"log_softmax", CastPolicy::fp32},
    {"cross_entropy", CastPolicy::fp32},
    {"nll_loss", CastPolicy::fp32},
    {"mse_loss", CastPolicy::fp32},
    {"l1_loss", CastPolicy::fp32},
    {"smooth_l1_loss", CastPolicy::fp32},
    {"huber_loss", CastPolicy::fp32},
    {"binary_cross_entropy_with_logits", CastPolicy::fp32},
    {"kl_div", CastPolicy::fp32},
    {"cosine_embedding_loss", CastPolicy::fp32},
    {"sum", CastPolicy::fp32},
    {"cumsum", CastPolicy::fp32},
    {"cumprod", CastPolicy::fp32},
    {"prod", CastPolicy::fp32},
    {"norm", CastPolicy::fp32},
    {"layer_norm", CastPolicy::fp32},
    {"group_norm", CastPolicy::fp32},
    {"exp", CastPolicy::fp32},
    {"log", CastPolicy::fp32},
    {"pow", CastPolicy::fp32},
    {"rsqrt", CastPolicy::fp32},
    {"reciprocal", CastPolicy::fp32},
};

// Whether the policy casts t: floating and not f64, as PyTorch's is_eligible.
bool eligible(const Tensor& t) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != DType::f64;
}

Tensor cast_lower(const Tensor& t, DType dtype) {
  if (!eligible(t) || t.dtype() == dtype) return t;
  // Weights: f32 leaves that require grad. Their copy is cached for the scope (keyed on the
  // version, so an in-place update in between casts again).
  const bool cacheable = t.dtype() == DType::f32 && t.requires_grad() && t.is_leaf();
  if (cacheable) {
    if (Tensor hit = autocast_cache_find(t, dtype); hit.defined()) return hit;
  }
  Tensor cast = t.to(dtype);
  if (cacheable) autocast_cache_store(t, cast);
  return cast;
}

}  // namespace

CastPolicy autocast_policy(const char* op) {
  for (const PolicyRow& row : kPolicy)
    if (std::strcmp(row.op, op) == 0) return row.policy;
  throw std::logic_error(std::string("autocast: no policy for op '") + op +
                         "'; add a row to ops/autocast.cpp");
}

AutocastArgs::AutocastArgs(const char* op, std::initializer_list<const Tensor*> operands) {
  if (!is_autocast_enabled()) return;
  const CastPolicy policy = autocast_policy(op);
  const DType lower = autocast_dtype();
  cast_.reserve(operands.size());
  for (const Tensor* t : operands) {
    if (policy == CastPolicy::lower_precision) {
      cast_.push_back(cast_lower(*t, lower));
    } else {
      cast_.push_back(eligible(*t) ? t->to(DType::f32) : *t);
    }
  }
  suspend_.emplace();
}

}  // namespace kiln
