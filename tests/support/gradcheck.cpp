#include "gradcheck.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace kiln::testing {

Tensor random_f64(const Shape& shape, uint64_t seed, double low, double high) {
  Generator gen(seed);
  return uniform(shape, low, high, DType::f64, Device::cpu(), &gen);
}

Tensor non_contiguous(const Tensor& t) {
  if (t.dim() < 2) {
    // Every other element of a tensor twice as long.
    Tensor wide = zeros({t.numel() * 2}, t.dtype());
    Tensor view = wide.slice(0, 0, t.numel() * 2, 2).view(t.shape());
    NoGradGuard no_grad;
    view.copy_(t);
    return view;
  }
  return t.transpose(0, 1).contiguous().transpose(0, 1);
}

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps, double atol, double rtol) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    if (t.defined() && is_floating(t.dtype())) {
      Tensor leaf = t.detach().to(DType::f64).contiguous().clone();
      leaf.requires_grad_();
      leaves.push_back(leaf);
    } else {
      leaves.push_back(t);
    }
  }
  Tensor out = f(leaves);
  Generator gen(1234);
  Tensor weights = randn(out.shape(), DType::f64, Device::cpu(), &gen);
  Tensor loss = sum(mul(out.to(DType::f64), weights));
  loss.backward();

  auto evaluate = [&]() {
    NoGradGuard no_grad;
    return sum(mul(f(leaves).to(DType::f64), weights)).item<double>();
  };

  GradcheckResult result;
  int reported = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    Tensor leaf = leaves[i];
    if (!leaf.defined() || !leaf.requires_grad()) continue;
    Tensor analytic = leaf.grad().defined() ? leaf.grad().contiguous() : zeros_like(leaf);
    double* x = leaf.data<double>();
    const double* a = analytic.data<double>();
    for (int64_t j = 0; j < leaf.numel(); ++j) {
      double saved = x[j];
      x[j] = saved + eps;
      double plus = evaluate();
      x[j] = saved - eps;
      double minus = evaluate();
      x[j] = saved;
      double numeric = (plus - minus) / (2 * eps);
      if (!(std::abs(a[j] - numeric) <= atol + rtol * std::abs(numeric))) {
        result.ok = false;
        if (reported++ < 5)
          result.message +=
              fmt::format("input {} element {}: analytic {} vs numeric {}\n", i, j, a[j], numeric);
      }
    }
  }
  return result;
}

}  // namespace kiln::testing
