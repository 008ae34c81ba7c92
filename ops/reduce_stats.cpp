// var, std_dev and norm: floating-point reductions whose forwards are written with sum and mean,
// each with its own backward node (a closed form, cheaper than recording every step). Written
// with ops only, they run on any device those ops run on.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/profiler.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/reduce_dims.h"

namespace kiln {

namespace {

struct VarResult {
  Tensor var;
  ReducedShape shape;
  double divisor = 0.0;  // N - correction
};

VarResult var_forward(const char* op, const Tensor& x, const Dims& dims, int64_t correction,
                      bool keepdim) {
  profiler::OpScope profile(op, {&x});
  require_defined(op, x);
  require_floating(op, x);
  VarResult v;
  v.shape = reduced_shape(op, x, dims, keepdim);
  // PyTorch clamps at zero: too large a correction gives inf (or nan), not a negative variance.
  v.divisor = static_cast<double>(std::max<int64_t>(0, v.shape.count - correction));
  NoGradGuard no_grad;
  Tensor xd = x.detach();
  // Two passes (mean first, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
  Tensor deviation = sub(xd, mean(xd, dims, true));
  v.var = div(sum(square(deviation), dims, keepdim), v.divisor);
  return v;
}

// d var / dx = 2 (x - mean) / (N - correction).
struct VarBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor input;
  Dims dims;
  Shape kept_shape;
  double divisor = 0.0;
  std::string name() const override { return "VarBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor x = input.unpack(*this);
    Tensor deviation = sub(x, mean(x, dims, true));
    return {mul(deviation, mul(g.reshape(kept_shape), 2.0 / divisor))};
  }
  void release_saved() override { input.reset(); }
};

// d std / dx = (x - mean) / ((N - correction) std), taken as 0 where std is 0 (as PyTorch).
struct StdBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor input, result;
  Dims dims;
  Shape kept_shape;
  double divisor = 0.0;
  std::string name() const override { return "StdBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor x = input.unpack(*this);
    Tensor std_kept = result.unpack(*this).reshape(kept_shape);
    Tensor scale = div(g.reshape(kept_shape), mul(std_kept, divisor));
    scale = masked_fill(scale, eq(std_kept, 0.0), 0.0);
    return {mul(sub(x, mean(x, dims, true)), scale)};
  }
  void release_saved() override { input.reset(), result.reset(); }
};

// d norm / dx = x |x|^(p-2) / norm^(p-1), 0 where the norm is 0; for p = inf the gradient is
// sign(x) shared evenly between the elements whose |x| is the maximum (or NaN).
struct NormBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor input, result;
  double p = 2.0;
  Dims dims;
  Shape kept_shape;
  std::string name() const override { return "NormBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor x = input.unpack(*this);
    Tensor norm_kept = result.unpack(*this).reshape(kept_shape);
    Tensor g_kept = g.reshape(kept_shape);
    if (std::isinf(p)) {
      // As PyTorch: NaN elements count among the maxima (and get sign(NaN) = 0 of it).
      Tensor ax = abs(x);
      Tensor hit = logical_or(eq(ax, norm_kept), isnan(ax)).to(g.dtype());
      Tensor share = div(hit, sum(hit, dims, true));
      return {mul(mul(sign(x), share), g_kept)};
    }
    if (p == 1.0) return {mul(sign(x), g_kept)};
    Tensor zero_norm = eq(norm_kept, 0.0);
    if (p == 2.0) return {mul(x, masked_fill(div(g_kept, norm_kept), zero_norm, 0.0))};
    Tensor scale = masked_fill(div(g_kept, pow(norm_kept, p - 1.0)), zero_norm, 0.0);
    return {mul(mul(sign(x), pow(abs(x), p - 1.0)), scale)};
  }
  void release_saved() override { input.reset(), result.reset(); }
};

}  // namespace

Tensor var(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim) {
  VarResult v = var_forward("var", x, dims, correction, keepdim);
  if (should_record({&x})) {
    auto node = std::make_shared<VarBackward>();
    node->input = SavedTensor(x);
    node->dims = dims;
    node->kept_shape = v.shape.kept_shape;
    node->divisor = v.divisor;
    record(v.var, node, {&x});
  }
  return v.var;
}

Tensor std_dev(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim) {
  VarResult v = var_forward("std_dev", x, dims, correction, keepdim);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = sqrt(v.var);
  }
  if (should_record({&x})) {
    auto node = std::make_shared<StdBackward>();
    node->input = SavedTensor(x);
    node->result = SavedTensor(out);
    node->dims = dims;
    node->kept_shape = v.shape.kept_shape;
    node->divisor = v.divisor;
    record(out, node, {&x});
  }
  return out;
}

Tensor norm(const Tensor& x, double p, const Dims& dims, bool keepdim) {
  if (AutocastArgs cast{"norm", {&x}}) return norm(cast[0], p, dims, keepdim);
  profiler::OpScope profile("norm", {&x});
  const char* op = "norm";
  require_defined(op, x);
  require_floating(op, x);
  KILN_CHECK(p > 0, ValueError, "norm: expected p > 0 (or inf), got p = {}", p);
  ReducedShape r = reduced_shape(op, x, dims, keepdim);
  Tensor out;
  {
    NoGradGuard no_grad;
    Tensor xd = x.detach();
    if (std::isinf(p)) {
      KILN_CHECK(r.count > 0, ValueError,
                 "norm: the inf-norm (max |x|) of zero elements is undefined (input {})",
                 describe(x));
      out = amax(abs(xd), dims, keepdim);
    } else if (p == 2.0) {
      out = sqrt(sum(square(xd), dims, keepdim));
    } else if (p == 1.0) {
      out = sum(abs(xd), dims, keepdim);
    } else {
      out = pow(sum(pow(abs(xd), p), dims, keepdim), 1.0 / p);
    }
  }
  if (should_record({&x})) {
    auto node = std::make_shared<NormBackward>();
    node->input = SavedTensor(x);
    node->result = SavedTensor(out);
    node->p = p;
    node->dims = dims;
    node->kept_shape = r.kept_shape;
    record(out, node, {&x});
  }
  return out;
}

}  // namespace kiln
