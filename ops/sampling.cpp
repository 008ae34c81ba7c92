#include "kiln/ops/sampling.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/factories.h"

namespace kiln {

namespace {

// The index of the first category whose running sum passes u * total (never a zero weight).
int64_t draw(const std::vector<double>& weights, double total, double u) {
  const double target = u * total;
  double sum = 0.0;
  int64_t last_nonzero = -1;
  for (size_t c = 0; c < weights.size(); ++c) {
    if (weights[c] <= 0.0) continue;
    sum += weights[c];
    last_nonzero = static_cast<int64_t>(c);
    if (target < sum) return last_nonzero;
  }
  return last_nonzero;  // rounding left target at the total
}

}  // namespace

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement,
                   Generator* generator) {
  const char* op = "multinomial";
  profiler::OpScope profile(op, {&probs});
  require_defined(op, probs);
  KILN_CHECK(is_floating(probs.dtype()), DTypeError,
             "multinomial: expected floating probabilities, got {}", dtype_name(probs.dtype()));
  KILN_CHECK(probs.dim() == 1 || probs.dim() == 2, ShapeError,
             "multinomial: expected probabilities [C] or [N, C], got {}", shape_str(probs.shape()));
  const int64_t categories = probs.size(-1);
  KILN_CHECK(categories > 0, ShapeError,
             "multinomial: expected at least one category, got shape {}", shape_str(probs.shape()));
  KILN_CHECK(num_samples > 0, ValueError, "multinomial: num_samples must be positive, got {}",
             num_samples);
  KILN_CHECK(replacement || num_samples <= categories, ValueError,
             "multinomial: cannot draw {} samples from {} categories without replacement",
             num_samples, categories);
  NoGradGuard no_grad;
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  const Tensor host = probs.detach().to(Device::cpu()).to(DType::f64).contiguous();
  const Tensor uniforms = rand({rows, num_samples}, DType::f64, Device::cpu(), generator);
  const double* p = host.data<double>();
  const double* u = uniforms.data<double>();
  Tensor out = empty({rows, num_samples}, DType::i64, Device::cpu());
  int64_t* o = out.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> weights(p + r * categories, p + (r + 1) * categories);
    double total = 0.0;
    int64_t nonzero = 0;
    for (int64_t c = 0; c < categories; ++c) {
      const double w = weights[static_cast<size_t>(c)];
      KILN_CHECK(std::isfinite(w) && w >= 0.0, ValueError,
                 "multinomial: probabilities must be finite and non-negative, got {} at row {} "
                 "category {}",
                 w, r, c);
      total += w;
      nonzero += w > 0.0;
    }
    KILN_CHECK(total > 0.0, ValueError, "multinomial: row {} of the probabilities sums to 0", r);
    KILN_CHECK(replacement || num_samples <= nonzero, ValueError,
               "multinomial: cannot draw {} samples without replacement from row {}, which has "
               "{} non-zero probabilities",
               num_samples, r, nonzero);
    for (int64_t s = 0; s < num_samples; ++s) {
      const int64_t c = draw(weights, total, u[r * num_samples + s]);
      o[r * num_samples + s] = c;
      if (!replacement) {
        total -= weights[static_cast<size_t>(c)];
        weights[static_cast<size_t>(c)] = 0.0;
      }
    }
  }
  if (probs.dim() == 1) out = out.view({num_samples});
  return out.to(probs.device());
}

}  // namespace kiln
