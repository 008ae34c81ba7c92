#include "kiln/optim/adaptive.h"

#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/core/op_name.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"

namespace kiln::optim {
namespace {

Options to_options(const RMSpropOptions& o) {
  return {{"lr", o.lr},
          {"alpha", o.alpha},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"momentum", o.momentum},
          {"centered", o.centered ? 1.0 : 0.0}};
}

Options to_options(const AdagradOptions& o) {
  return {{"lr", o.lr},
          {"lr_decay", o.lr_decay},
          {"weight_decay", o.weight_decay},
          {"initial_accumulator_value", o.initial_accumulator_value},
          {"eps", o.eps}};
}

// The named state tensor, made as `make()` on first use.
template <class Make>
Tensor& state_tensor(std::map<std::string, Tensor>& state, const char* name, Make make) {
  auto it = state.find(name);
  if (it == state.end()) it = state.emplace(name, make()).first;
  return it->second;
}

void check_non_negative(const char* optimizer, const Options& o,
                        std::initializer_list<const char*> keys) {
  for (const char* key : keys)
    KILN_CHECK(o.at(key) >= 0 && std::isfinite(o.at(key)), ValueError,
               "{}: {} must be finite and non-negative, got {}", optimizer, key, o.at(key));
}

void check_betas(const char* optimizer, const Options& o) {
  for (const char* key : {"beta1", "beta2"})
    KILN_CHECK(o.at(key) >= 0 && o.at(key) < 1, ValueError, "{}: {} must be in [0, 1), got {}",
               optimizer, key, o.at(key));
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options)
    : Optimizer("RMSprop", to_options(options)) {
  add_param_groups(std::move(groups));
}

void RMSprop::check_options(const Options& o) const {
  for (const char* key : {"lr", "eps", "weight_decay", "momentum", "alpha"})
    KILN_CHECK(o.at(key) >= 0 && std::isfinite(o.at(key)), ValueError,
               "RMSprop: {} must be finite and non-negative, got {}", key, o.at(key));
}

void RMSprop::step() {
  const OpNameScope op_name("RMSprop.step");
  NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const Options& o = group.options;
    const double lr = o.at("lr"), alpha = o.at("alpha"), eps = o.at("eps");
    const double weight_decay = o.at("weight_decay"), momentum = o.at("momentum");
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      auto& state = state_of(p);
      state_tensor(state, "step", [] { return zeros({}, DType::f64); }).add_(1.0);
      if (weight_decay != 0) g = add(g, p, weight_decay);
      Tensor& square_avg = state_tensor(state, "square_avg", [&] { return zeros_like(p); });
      square_avg.mul_(alpha).add_(mul(g, g), 1.0 - alpha);
      Tensor avg;
      if (o.at("centered") != 0.0) {
        Tensor& grad_avg = state_tensor(state, "grad_avg", [&] { return zeros_like(p); });
        grad_avg.mul_(alpha).add_(g, 1.0 - alpha);
        avg = add(sqrt(sub(square_avg, mul(grad_avg, grad_avg))), eps);
      } else {
        avg = add(sqrt(square_avg), eps);
      }
      if (momentum > 0) {
        Tensor& buf = state_tensor(state, "momentum_buffer", [&] { return zeros_like(p); });
        buf.mul_(momentum).add_(div(g, avg));
        p.add_(buf, -lr);
      } else {
        p.add_(div(g, avg), -lr);
      }
    }
  }
}

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions options)
    : Optimizer("Adagrad", to_options(options)) {
  add_param_groups(std::move(groups));
}

void Adagrad::check_options(const Options& o) const {
  for (const char* key : {"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"})
    KILN_CHECK(o.at(key) >= 0 && std::isfinite(o.at(key)), ValueError,
               "Adagrad: {} must be finite and non-negative, got {}", key, o.at(key));
}

void Adagrad::step() {
  const OpNameScope op_name("Adagrad.step");
  NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const Options& o = group.options;
    const double lr = o.at("lr"), lr_decay = o.at("lr_decay"), eps = o.at("eps");
    const double weight_decay = o.at("weight_decay");
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      auto& state = state_of(p);
      Tensor& step_count = state_tensor(state, "step", [] { return zeros({}, DType::f64); });
      step_count.add_(1.0);
      const double t = step_count.item<double>();
      Tensor& sum = state_tensor(state, "sum",
                                 [&] { return full_like(p, o.at("initial_accumulator_value")); });
      if (weight_decay != 0) g = add(g, p, weight_decay);
      const double clr = lr / (1.0 + (t - 1.0) * lr_decay);
      sum.add_(mul(g, g));
      p.add_(div(g, add(sqrt(sum), eps)), -clr);
    }
  }
}

NAdam::NAdam(std::vector<Tensor> params, NAdamOptions o)
    : Optimizer("NAdam", {{"lr", o.lr},
                          {"beta1", o.beta1},
                          {"beta2", o.beta2},
                          {"eps", o.eps},
                          {"weight_decay", o.weight_decay},
                          {"momentum_decay", o.momentum_decay}}) {
  add_param_groups({ParamGroup{std::move(params), {}}});
}

void NAdam::check_options(const Options& o) const {
  check_non_negative("NAdam", o, {"lr", "eps", "weight_decay", "momentum_decay"});
  check_betas("NAdam", o);
}

void NAdam::step() {
  const OpNameScope op_name("NAdam.step");
  NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const Options& o = group.options;
    const double lr = o.at("lr"), beta1 = o.at("beta1"), beta2 = o.at("beta2"), eps = o.at("eps");
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      auto& state = state_of(p);
      Tensor& step_count = state_tensor(state, "step", [] { return zeros({}, DType::f64); });
      Tensor& mu_product = state_tensor(state, "mu_product", [] { return ones({}, DType::f64); });
      step_count.add_(1.0);
      const double t = step_count.item<double>();
      if (o.at("weight_decay") != 0) g = add(g, p, o.at("weight_decay"));
      const double mu = beta1 * (1.0 - 0.5 * std::pow(0.96, t * o.at("momentum_decay")));
      const double mu_next = beta1 * (1.0 - 0.5 * std::pow(0.96, (t + 1) * o.at("momentum_decay")));
      mu_product.mul_(mu);
      const double product = mu_product.item<double>(), product_next = product * mu_next;
      Tensor& exp_avg = state_tensor(state, "exp_avg", [&] { return zeros_like(p); });
      Tensor& exp_avg_sq = state_tensor(state, "exp_avg_sq", [&] { return zeros_like(p); });
      exp_avg.mul_(beta1).add_(g, 1.0 - beta1);
      exp_avg_sq.mul_(beta2).add_(mul(g, g), 1.0 - beta2);
      const Tensor denom = add(sqrt(div(exp_avg_sq, 1.0 - std::pow(beta2, t))), eps);
      p.add_(div(g, denom), -lr * (1.0 - mu) / (1.0 - product));
      p.add_(div(exp_avg, denom), -lr * mu_next / (1.0 - product_next));
    }
  }
}

RAdam::RAdam(std::vector<Tensor> params, RAdamOptions o)
    : Optimizer("RAdam", {{"lr", o.lr},
                          {"beta1", o.beta1},
                          {"beta2", o.beta2},
                          {"eps", o.eps},
                          {"weight_decay", o.weight_decay}}) {
  add_param_groups({ParamGroup{std::move(params), {}}});
}

void RAdam::check_options(const Options& o) const {
  check_non_negative("RAdam", o, {"lr", "eps", "weight_decay"});
  check_betas("RAdam", o);
}

void RAdam::step() {
  const OpNameScope op_name("RAdam.step");
  NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const Options& o = group.options;
    const double lr = o.at("lr"), beta1 = o.at("beta1"), beta2 = o.at("beta2"), eps = o.at("eps");
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      auto& state = state_of(p);
      Tensor& step_count = state_tensor(state, "step", [] { return zeros({}, DType::f64); });
      step_count.add_(1.0);
      const double t = step_count.item<double>();
      const double correction1 = 1.0 - std::pow(beta1, t), correction2 = 1.0 - std::pow(beta2, t);
      if (o.at("weight_decay") != 0) g = add(g, p, o.at("weight_decay"));
      Tensor& exp_avg = state_tensor(state, "exp_avg", [&] { return zeros_like(p); });
      Tensor& exp_avg_sq = state_tensor(state, "exp_avg_sq", [&] { return zeros_like(p); });
      exp_avg.mul_(beta1).add_(g, 1.0 - beta1);
      exp_avg_sq.mul_(beta2).add_(mul(g, g), 1.0 - beta2);
      const Tensor corrected = div(exp_avg, correction1);
      const double rho_inf = 2.0 / (1.0 - beta2) - 1.0;
      const double rho_t = rho_inf - 2.0 * t * std::pow(beta2, t) / correction2;
      if (rho_t > 5.0) {
        const double rect = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                                      ((rho_inf - 4) * (rho_inf - 2) * rho_t));
        const Tensor adaptive = rdiv(std::sqrt(correction2), add(sqrt(exp_avg_sq), eps));
        p.add_(mul(mul(corrected, adaptive), lr * rect), -1.0);
      } else {
        p.add_(corrected, -lr);
      }
    }
  }
}

}  // namespace kiln::optim
