// The pointwise losses of ops/loss.h, each PyTorch 1.13's formula (aten/native/Loss.cpp) written
// with kiln's elementwise ops, so they run on every device and dtype those take and their
// gradients come from the composition.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>

#include "kiln/core/autocast.h"
#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/reduce.h"

namespace kiln {
namespace {

void check_pair(const char* op, const Tensor& input, const Tensor& target) {
  require_defined(op, input);
  require_defined(op, target, "target");
  require_floating(op, input);
  require_floating(op, target, "target");
  KILN_CHECK(input.shape() == target.shape(), ShapeError,
             "{}: input {} and target {} must have the same shape ({} does not broadcast)", op,
             describe(input), describe(target), op);
}

Tensor reduce(const char* op, const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::none:
      return loss;
    case Reduction::sum:
      return sum(loss);
    case Reduction::mean:
      return mean(loss);
    case Reduction::batchmean:
      break;
  }
  throw ValueError(
      fmt::format("{}: reduction batchmean is kl_div's; expected none, mean or sum", op));
}

}  // namespace

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (AutocastArgs cast{"l1_loss", {&input, &target}}) return l1_loss(cast[0], cast[1], reduction);
  profiler::OpScope profile("l1_loss", {&input, &target});
  check_pair("l1_loss", input, target);
  return reduce("l1_loss", abs(sub(input, target)), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  if (AutocastArgs cast{"smooth_l1_loss", {&input, &target}})
    return smooth_l1_loss(cast[0], cast[1], reduction, beta);
  profiler::OpScope profile("smooth_l1_loss", {&input, &target});
  check_pair("smooth_l1_loss", input, target);
  KILN_CHECK(beta >= 0 && std::isfinite(beta), ValueError,
             "smooth_l1_loss: beta must be finite and non-negative, got {}", beta);
  const Tensor z = abs(sub(input, target));
  if (beta == 0.0) return reduce("smooth_l1_loss", z, reduction);
  const Tensor loss = where(lt(z, beta), div(mul(square(z), 0.5), beta), sub(z, 0.5 * beta));
  return reduce("smooth_l1_loss", loss, reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  if (AutocastArgs cast{"huber_loss", {&input, &target}})
    return huber_loss(cast[0], cast[1], reduction, delta);
  profiler::OpScope profile("huber_loss", {&input, &target});
  check_pair("huber_loss", input, target);
  KILN_CHECK(delta > 0 && std::isfinite(delta), ValueError,
             "huber_loss: delta must be finite and positive, got {}", delta);
  const Tensor z = abs(sub(input, target));
  const Tensor loss = where(lt(z, delta), mul(square(z), 0.5), mul(sub(z, 0.5 * delta), delta));
  return reduce("huber_loss", loss, reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                            Reduction reduction) {
  KILN_CHECK(!is_autocast_enabled(), ValueError,
             "binary_cross_entropy: unsafe to autocast (its log of a 16-bit probability "
             "saturates), as in PyTorch; compute it on the logits with "
             "binary_cross_entropy_with_logits, which is safe to autocast");
  profiler::OpScope profile("binary_cross_entropy", {&input, &target});
  check_pair("binary_cross_entropy", input, target);
  // A device-wide check would read the GPU back; PyTorch's CUDA kernel asserts in the kernel.
  if (input.device().is_cpu() && input.numel() > 0) {
    const double low = min(input.detach()).item(), high = max(input.detach()).item();
    KILN_CHECK(low >= 0.0 && high <= 1.0, ValueError,
               "binary_cross_entropy: input must be probabilities in [0, 1], got values from {} "
               "to {} (for logits use binary_cross_entropy_with_logits)",
               low, high);
  }
  const Tensor log_x = clamp(log(input), -100.0, std::nullopt);
  const Tensor log_1mx = clamp(log(rsub(1.0, input)), -100.0, std::nullopt);
  Tensor loss = neg(add(mul(target, log_x), mul(rsub(1.0, target), log_1mx)));
  if (weight.defined()) loss = mul(loss, weight);
  return reduce("binary_cross_entropy", loss, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const Tensor& weight, Reduction reduction,
                                        const Tensor& pos_weight) {
  if (AutocastArgs cast{"binary_cross_entropy_with_logits",
                        {&logits, &target, &weight, &pos_weight}})
    return binary_cross_entropy_with_logits(cast[0], cast[1], cast[2], reduction, cast[3]);
  profiler::OpScope profile("binary_cross_entropy_with_logits", {&logits, &target});
  check_pair("binary_cross_entropy_with_logits", logits, target);
  // PyTorch's stable form: max_val = max(-x, 0); log(1 + e^-x) = max_val + log(e^-max_val +
  // e^(-x - max_val)).
  const Tensor max_val = clamp(neg(logits), 0.0, std::nullopt);
  const Tensor softplus_neg =
      add(log(add(exp(neg(max_val)), exp(sub(neg(logits), max_val)))), max_val);
  const Tensor negative = mul(rsub(1.0, target), logits);
  Tensor loss;
  if (pos_weight.defined()) {
    const Tensor log_weight = add(mul(sub(pos_weight, 1.0), target), 1.0);
    loss = add(negative, mul(log_weight, softplus_neg));
  } else {
    loss = add(negative, softplus_neg);
  }
  if (weight.defined()) loss = mul(loss, weight);
  return reduce("binary_cross_entropy_with_logits", loss, reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  if (AutocastArgs cast{"kl_div", {&input, &target}})
    return kl_div(cast[0], cast[1], reduction, log_target);
  profiler::OpScope profile("kl_div", {&input, &target});
  check_pair("kl_div", input, target);
  Tensor loss;
  if (log_target) {
    loss = mul(exp(target), sub(target, input));
  } else {
    // xlogy(t, t) - t * input: 0 where t is 0 (log of 1 there, so no -inf meets the 0).
    const Tensor safe = where(gt(target, 0.0), target, ones_like(target));
    loss = sub(mul(target, log(safe)), mul(target, input));
  }
  if (reduction == Reduction::batchmean) {
    const int64_t batch = input.dim() > 0 ? input.size(0) : 1;
    return div(sum(loss), static_cast<double>(batch));
  }
  return reduce("kl_div", loss, reduction);
}

Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                             double margin, Reduction reduction) {
  const char* op = "cosine_embedding_loss";
  if (AutocastArgs cast{op, {&input1, &input2}})
    return cosine_embedding_loss(cast[0], cast[1], target, margin, reduction);
  profiler::OpScope profile(op, {&input1, &input2, &target});
  check_pair(op, input1, input2);
  require_defined(op, target, "target");
  KILN_CHECK(input1.dim() == 1 || input1.dim() == 2, ShapeError,
             "{}: expected inputs [N, D] or [D], got {}", op, describe(input1));
  const int64_t rows = input1.dim() == 2 ? input1.size(0) : 1;
  KILN_CHECK(target.numel() == rows && target.dim() == input1.dim() - 1, ShapeError,
             "{}: expected a target of shape [{}] (one 1 or -1 per row), got {}", op, rows,
             describe(target));
  const int64_t d = input1.dim() - 1;
  const double eps = 1e-12;  // PyTorch's EPSILON in aten/native/Loss.cpp
  const Tensor dot = sum(mul(input1, input2), {d});
  const Tensor norms =
      sqrt(mul(add(sum(square(input1), {d}), eps), add(sum(square(input2), {d}), eps)));
  const Tensor cos = div(dot, norms);
  const Tensor zero = zeros_like(cos);
  const Tensor t = target.to(cos.dtype());
  const Tensor loss = add(where(eq(t, 1.0), rsub(1.0, cos), zero),
                          where(eq(t, -1.0), clamp(sub(cos, margin), 0.0, std::nullopt), zero));
  return reduce(op, loss, reduction);
}

}  // namespace kiln
