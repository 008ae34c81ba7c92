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

using State = std::map<std::string, Tensor>;

// The named state tensor, made as `make()` on first use.
template <class Make>
Tensor& state_tensor(State& state, const char* name, Make make) {
  auto it = state.find(name);
  if (it == state.end()) it = state.emplace(name, make()).first;
  return it->second;
}

// Advances the parameter's step count (a 0-dim f64 "step", as PyTorch keeps it) and returns it.
double count_step(State& state) {
  Tensor& step = state_tensor(state, "step", [] { return zeros({}, DType::f64); });
  step.add_(1.0);
  return step.item<double>();
}

// update(options, param, gradient) for every parameter that has a gradient, group by group,
// without recording history: the loop each step() below runs.
template <class Update>
void for_each_gradient(std::vector<ParamGroup>& groups, const char* op_name, Update update) {
  const OpNameScope name(op_name);
  NoGradGuard no_grad;
  for (auto& group : groups)
    for (Tensor& p : group.params)
      if (const Tensor g = p.grad(); g.defined()) update(group.options, p, g);
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

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  return {ParamGroup{std::move(params), {}}};
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(one_group(std::move(params)), options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions o)
    : Optimizer("RMSprop", {{"lr", o.lr},
                            {"alpha", o.alpha},
                            {"eps", o.eps},
                            {"weight_decay", o.weight_decay},
                            {"momentum", o.momentum},
                            {"centered", o.centered ? 1.0 : 0.0}}) {
  add_param_groups(std::move(groups));
}

void RMSprop::check_options(const Options& o) const {
  check_non_negative("RMSprop", o, {"lr", "eps", "weight_decay", "momentum", "alpha"});
}

void RMSprop::step() {
  for_each_gradient(param_groups(), "RMSprop.step", [&](const Options& o, Tensor& p, Tensor g) {
    const double alpha = o.at("alpha"), eps = o.at("eps"), momentum = o.at("momentum");
    State& state = state_of(p);
    count_step(state);
    if (o.at("weight_decay") != 0) g = add(g, p, o.at("weight_decay"));
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
      p.add_(buf, -o.at("lr"));
    } else {
      p.add_(div(g, avg), -o.at("lr"));
    }
  });
}

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(one_group(std::move(params)), options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions o)
    : Optimizer("Adagrad", {{"lr", o.lr},
                            {"lr_decay", o.lr_decay},
                            {"weight_decay", o.weight_decay},
                            {"initial_accumulator_value", o.initial_accumulator_value},
                            {"eps", o.eps}}) {
  add_param_groups(std::move(groups));
}

void Adagrad::check_options(const Options& o) const {
  check_non_negative("Adagrad", o,
                     {"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"});
}

void Adagrad::step() {
  for_each_gradient(param_groups(), "Adagrad.step", [&](const Options& o, Tensor& p, Tensor g) {
    State& state = state_of(p);
    const double t = count_step(state);
    Tensor& sum =
        state_tensor(state, "sum", [&] { return full_like(p, o.at("initial_accumulator_value")); });
    if (o.at("weight_decay") != 0) g = add(g, p, o.at("weight_decay"));
    const double clr = o.at("lr") / (1.0 + (t - 1.0) * o.at("lr_decay"));
    sum.add_(mul(g, g));
    p.add_(div(g, add(sqrt(sum), o.at("eps"))), -clr);
  });
}

NAdam::NAdam(std::vector<Tensor> params, NAdamOptions o)
    : Optimizer("NAdam", {{"lr", o.lr},
                          {"beta1", o.beta1},
                          {"beta2", o.beta2},
                          {"eps", o.eps},
                          {"weight_decay", o.weight_decay},
                          {"momentum_decay", o.momentum_decay}}) {
  add_param_groups(one_group(std::move(params)));
}

void NAdam::check_options(const Options& o) const {
  check_non_negative("NAdam", o, {"lr", "eps", "weight_decay", "momentum_decay"});
  check_betas("NAdam", o);
}

void NAdam::step() {
  for_each_gradient(param_groups(), "NAdam.step", [&](const Options& o, Tensor& p, Tensor g) {
    const double lr = o.at("lr"), beta1 = o.at("beta1"), beta2 = o.at("beta2");
    State& state = state_of(p);
    const double t = count_step(state);
    Tensor& mu_product = state_tensor(state, "mu_product", [] { return ones({}, DType::f64); });
    if (o.at("weight_decay") != 0) g = add(g, p, o.at("weight_decay"));
    const double decay = o.at("momentum_decay");
    const double mu = beta1 * (1.0 - 0.5 * std::pow(0.96, t * decay));
    const double mu_next = beta1 * (1.0 - 0.5 * std::pow(0.96, (t + 1) * decay));
    mu_product.mul_(mu);
    const double product = mu_product.item<double>(), product_next = product * mu_next;
    Tensor& exp_avg = state_tensor(state, "exp_avg", [&] { return zeros_like(p); });
    Tensor& exp_avg_sq = state_tensor(state, "exp_avg_sq", [&] { return zeros_like(p); });
    exp_avg.mul_(beta1).add_(g, 1.0 - beta1);
    exp_avg_sq.mul_(beta2).add_(mul(g, g), 1.0 - beta2);
    const Tensor denom = add(sqrt(div(exp_avg_sq, 1.0 - std::pow(beta2, t))), o.at("eps"));
    p.add_(div(g, denom), -lr * (1.0 - mu) / (1.0 - product));
    p.add_(div(exp_avg, denom), -lr * mu_next / (1.0 - product_next));
  });
}

RAdam::RAdam(std::vector<Tensor> params, RAdamOptions o)
    : Optimizer("RAdam", {{"lr", o.lr},
                          {"beta1", o.beta1},
                          {"beta2", o.beta2},
                          {"eps", o.eps},
                          {"weight_decay", o.weight_decay}}) {
  add_param_groups(one_group(std::move(params)));
}

void RAdam::check_options(const Options& o) const {
  check_non_negative("RAdam", o, {"lr", "eps", "weight_decay"});
  check_betas("RAdam", o);
}

void RAdam::step() {
  for_each_gradient(param_groups(), "RAdam.step", [&](const Options& o, Tensor& p, Tensor g) {
    const double lr = o.at("lr"), beta1 = o.at("beta1"), beta2 = o.at("beta2");
    State& state = state_of(p);
    const double t = count_step(state);
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
      const double rect =
          std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
      const Tensor adaptive = rdiv(std::sqrt(correction2), add(sqrt(exp_avg_sq), o.at("eps")));
      p.add_(mul(mul(corrected, adaptive), lr * rect), -1.0);
    } else {
      p.add_(corrected, -lr);
    }
  });
}

}  // namespace kiln::optim
