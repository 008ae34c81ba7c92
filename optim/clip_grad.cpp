#include "kiln/optim/clip_grad.h"

#include <cmath>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/index.h"
#include "kiln/ops/reduce.h"

namespace kiln::optim {

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  KILN_CHECK(clip_value >= 0 && std::isfinite(clip_value), ValueError,
             "clip_grad_value_: clip_value must be finite and non-negative, got {}", clip_value);
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.copy_(clamp(g, -clip_value, clip_value));
  }
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  NoGradGuard no_grad;
  KILN_CHECK(max_norm >= 0 && norm_type > 0, ValueError,
             "clip_grad_norm_: max_norm must be non-negative and norm_type positive, got {} and {}",
             max_norm, norm_type);
  std::vector<Tensor> norms;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    // In f64 on the gradient's device, gathered on the first gradient's: no wait for the device.
    const Device first = norms.empty() ? g.device() : norms.front().device();
    norms.push_back(norm(g.to(DType::f64), norm_type).to(first));
  }
  if (norms.empty()) return 0.0;
  // The p-norm of the gradients' p-norms is the p-norm of all their elements (for the inf-norm, the
  // largest of their largest elements). Its .item() is the call's one wait for the device.
  const double total = norm(stack(norms), norm_type).item<double>();
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) g.mul_(coef);
    }
  }
  return total;
}

}  // namespace kiln::optim
