#include "kiln/ops/activation.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"

namespace kiln {

Tensor elu(const Tensor& x, double alpha) {
  profiler::OpScope profile("elu", {&x});
  require_defined("elu", x);
  require_floating("elu", x);
  return where(gt(x, 0.0), x, mul(sub(exp(x), 1.0), alpha));
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  profiler::OpScope profile("softplus", {&x});
  require_defined("softplus", x);
  require_floating("softplus", x);
  KILN_CHECK(beta != 0.0 && std::isfinite(beta), ValueError,
             "softplus: beta must be finite and nonzero, got {}", beta);
  const Tensor scaled = mul(x, beta);
  // log(1 + e^z) as max(z, 0) + log1p(e^-|z|): no overflow for large z; log1p(e) as e - e^2 / 2 +
  // e^3 / 3 where e is below 1e-4, which keeps the tiny values of very negative z (kiln has no
  // log1p op).
  const Tensor e = exp(neg(abs(scaled)));
  const Tensor log1p_e =
      where(lt(e, 1e-4), mul(e, rsub(1.0, mul(e, rsub(0.5, div(e, 3.0))))), log(add(e, 1.0)));
  const Tensor soft = div(add(clamp(scaled, 0.0, std::nullopt), log1p_e), beta);
  return where(gt(scaled, threshold), x, soft);
}

Tensor hardswish(const Tensor& x) {
  profiler::OpScope profile("hardswish", {&x});
  require_defined("hardswish", x);
  require_floating("hardswish", x);
  return div(mul(x, clamp(add(x, 3.0), 0.0, 6.0)), 6.0);
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  profiler::OpScope profile("prelu", {&x, &weight});
  require_defined("prelu", x);
  require_defined("prelu", weight, "weight");
  require_floating("prelu", x);
  const int64_t n = weight.numel();
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  KILN_CHECK(weight.dim() <= 1 && (n == 1 || n == channels), ShapeError,
             "prelu: weight must hold 1 value or one per channel ({} for input {}), got {}",
             channels, shape_str(x.shape()), shape_str(weight.shape()));
  Tensor w = weight;
  if (n > 1) {
    Shape per_channel(static_cast<size_t>(x.dim()), 1);
    per_channel[1] = n;
    w = weight.reshape(per_channel);
  }
  return where(gt(x, 0.0), x, mul(w, x));
}

}  // namespace kiln
