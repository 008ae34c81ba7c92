#include "kiln/optim/adaptive.h"

#include <array>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
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

// Throws ValueError naming the optimizer and the option unless each value is finite and
// non-negative.
void check_non_negative(const char* optimizer,
                        std::initializer_list<std::pair<const char*, double>> options) {
  for (const auto& [name, value] : options)
    KILN_CHECK(value >= 0 && std::isfinite(value), ValueError,
               "{}: {} must be finite and non-negative, got {}", optimizer, name, value);
}

void check_betas(const char* optimizer, double beta1, double beta2) {
  for (const auto& [name, value] : {std::pair{"beta1", beta1}, std::pair{"beta2", beta2}})
    KILN_CHECK(value >= 0 && value < 1, ValueError, "{}: {} must be in [0, 1), got {}", optimizer,
               name, value);
}

template <class Group>
std::vector<Group> one_group(std::vector<Tensor> params) {
  return {{.params = std::move(params)}};
}

// The state dict's names, as PyTorch's, with its betas pairs as beta1 and beta2.
constexpr std::array kRMSpropFields{
    number_option("lr", &RMSpropOptions::lr, &RMSpropParamGroup::lr),
    number_option("alpha", &RMSpropOptions::alpha, &RMSpropParamGroup::alpha),
    number_option("eps", &RMSpropOptions::eps, &RMSpropParamGroup::eps),
    number_option("weight_decay", &RMSpropOptions::weight_decay, &RMSpropParamGroup::weight_decay),
    number_option("momentum", &RMSpropOptions::momentum, &RMSpropParamGroup::momentum),
    flag_option("centered", &RMSpropOptions::centered, &RMSpropParamGroup::centered),
};
constexpr std::array kAdagradFields{
    number_option("lr", &AdagradOptions::lr, &AdagradParamGroup::lr),
    number_option("lr_decay", &AdagradOptions::lr_decay, &AdagradParamGroup::lr_decay),
    number_option("weight_decay", &AdagradOptions::weight_decay, &AdagradParamGroup::weight_decay),
    number_option("initial_accumulator_value", &AdagradOptions::initial_accumulator_value,
                  &AdagradParamGroup::initial_accumulator_value),
    number_option("eps", &AdagradOptions::eps, &AdagradParamGroup::eps),
};
constexpr std::array kNAdamFields{
    number_option("lr", &NAdamOptions::lr, &NAdamParamGroup::lr),
    number_option("beta1", &NAdamOptions::beta1, &NAdamParamGroup::beta1),
    number_option("beta2", &NAdamOptions::beta2, &NAdamParamGroup::beta2),
    number_option("eps", &NAdamOptions::eps, &NAdamParamGroup::eps),
    number_option("weight_decay", &NAdamOptions::weight_decay, &NAdamParamGroup::weight_decay),
    number_option("momentum_decay", &NAdamOptions::momentum_decay,
                  &NAdamParamGroup::momentum_decay),
};
constexpr std::array kRAdamFields{
    number_option("lr", &RAdamOptions::lr, &RAdamParamGroup::lr),
    number_option("beta1", &RAdamOptions::beta1, &RAdamParamGroup::beta1),
    number_option("beta2", &RAdamOptions::beta2, &RAdamParamGroup::beta2),
    number_option("eps", &RAdamOptions::eps, &RAdamParamGroup::eps),
    number_option("weight_decay", &RAdamOptions::weight_decay, &RAdamParamGroup::weight_decay),
};

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(one_group<RMSpropParamGroup>(std::move(params)), options) {}

RMSprop::RMSprop(std::vector<RMSpropParamGroup> groups, RMSpropOptions options)
    : TypedOptimizer("RMSprop", options, kRMSpropFields) {
  add_param_groups(std::move(groups));
}

void RMSprop::check_options(const RMSpropOptions& o) const {
  check_non_negative("RMSprop", {{"lr", o.lr},
                                 {"eps", o.eps},
                                 {"weight_decay", o.weight_decay},
                                 {"momentum", o.momentum},
                                 {"alpha", o.alpha}});
}

void RMSprop::step() {
  for_each_gradient("RMSprop.step", [&](const RMSpropOptions& o, Tensor& p, Tensor g) {
    State& state = state_of(p);
    count_step(state);
    if (o.weight_decay != 0) g = add(g, p, o.weight_decay);
    Tensor& square_avg = state_tensor(state, "square_avg", [&] { return zeros_like(p); });
    square_avg.mul_(o.alpha).add_(mul(g, g), 1.0 - o.alpha);
    Tensor avg;
    if (o.centered) {
      Tensor& grad_avg = state_tensor(state, "grad_avg", [&] { return zeros_like(p); });
      grad_avg.mul_(o.alpha).add_(g, 1.0 - o.alpha);
      avg = add(sqrt(sub(square_avg, mul(grad_avg, grad_avg))), o.eps);
    } else {
      avg = add(sqrt(square_avg), o.eps);
    }
    if (o.momentum > 0) {
      Tensor& buf = state_tensor(state, "momentum_buffer", [&] { return zeros_like(p); });
      buf.mul_(o.momentum).add_(div(g, avg));
      p.add_(buf, -o.lr);
    } else {
      p.add_(div(g, avg), -o.lr);
    }
  });
}

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(one_group<AdagradParamGroup>(std::move(params)), options) {}

Adagrad::Adagrad(std::vector<AdagradParamGroup> groups, AdagradOptions options)
    : TypedOptimizer("Adagrad", options, kAdagradFields) {
  add_param_groups(std::move(groups));
}

void Adagrad::check_options(const AdagradOptions& o) const {
  check_non_negative("Adagrad", {{"lr", o.lr},
                                 {"lr_decay", o.lr_decay},
                                 {"weight_decay", o.weight_decay},
                                 {"initial_accumulator_value", o.initial_accumulator_value},
                                 {"eps", o.eps}});
}

void Adagrad::step() {
  for_each_gradient("Adagrad.step", [&](const AdagradOptions& o, Tensor& p, Tensor g) {
    State& state = state_of(p);
    const double t = count_step(state);
    Tensor& sum =
        state_tensor(state, "sum", [&] { return full_like(p, o.initial_accumulator_value); });
    if (o.weight_decay != 0) g = add(g, p, o.weight_decay);
    const double clr = o.lr / (1.0 + (t - 1.0) * o.lr_decay);
    sum.add_(mul(g, g));
    p.add_(div(g, add(sqrt(sum), o.eps)), -clr);
  });
}

NAdam::NAdam(std::vector<Tensor> params, NAdamOptions options)
    : NAdam(one_group<NAdamParamGroup>(std::move(params)), options) {}

NAdam::NAdam(std::vector<NAdamParamGroup> groups, NAdamOptions options)
    : TypedOptimizer("NAdam", options, kNAdamFields) {
  add_param_groups(std::move(groups));
}

void NAdam::check_options(const NAdamOptions& o) const {
  check_non_negative("NAdam", {{"lr", o.lr},
                               {"eps", o.eps},
                               {"weight_decay", o.weight_decay},
                               {"momentum_decay", o.momentum_decay}});
  check_betas("NAdam", o.beta1, o.beta2);
}

void NAdam::step() {
  for_each_gradient("NAdam.step", [&](const NAdamOptions& o, Tensor& p, Tensor g) {
    const double lr = o.lr, beta1 = o.beta1, beta2 = o.beta2;
    State& state = state_of(p);
    const double t = count_step(state);
    Tensor& mu_product = state_tensor(state, "mu_product", [] { return ones({}, DType::f64); });
    if (o.weight_decay != 0) g = add(g, p, o.weight_decay);
    const double decay = o.momentum_decay;
    const double mu = beta1 * (1.0 - 0.5 * std::pow(0.96, t * decay));
    const double mu_next = beta1 * (1.0 - 0.5 * std::pow(0.96, (t + 1) * decay));
    mu_product.mul_(mu);
    const double product = mu_product.item<double>(), product_next = product * mu_next;
    Tensor& exp_avg = state_tensor(state, "exp_avg", [&] { return zeros_like(p); });
    Tensor& exp_avg_sq = state_tensor(state, "exp_avg_sq", [&] { return zeros_like(p); });
    exp_avg.mul_(beta1).add_(g, 1.0 - beta1);
    exp_avg_sq.mul_(beta2).add_(mul(g, g), 1.0 - beta2);
    const Tensor denom = add(sqrt(div(exp_avg_sq, 1.0 - std::pow(beta2, t))), o.eps);
    p.add_(div(g, denom), -lr * (1.0 - mu) / (1.0 - product));
    p.add_(div(exp_avg, denom), -lr * mu_next / (1.0 - product_next));
  });
}

RAdam::RAdam(std::vector<Tensor> params, RAdamOptions options)
    : RAdam(one_group<RAdamParamGroup>(std::move(params)), options) {}

RAdam::RAdam(std::vector<RAdamParamGroup> groups, RAdamOptions options)
    : TypedOptimizer("RAdam", options, kRAdamFields) {
  add_param_groups(std::move(groups));
}

void RAdam::check_options(const RAdamOptions& o) const {
  check_non_negative("RAdam", {{"lr", o.lr}, {"eps", o.eps}, {"weight_decay", o.weight_decay}});
  check_betas("RAdam", o.beta1, o.beta2);
}

void RAdam::step() {
  for_each_gradient("RAdam.step", [&](const RAdamOptions& o, Tensor& p, Tensor g) {
    const double lr = o.lr, beta1 = o.beta1, beta2 = o.beta2;
    State& state = state_of(p);
    const double t = count_step(state);
    const double correction1 = 1.0 - std::pow(beta1, t), correction2 = 1.0 - std::pow(beta2, t);
    if (o.weight_decay != 0) g = add(g, p, o.weight_decay);
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
      const Tensor adaptive = rdiv(std::sqrt(correction2), add(sqrt(exp_avg_sq), o.eps));
      p.add_(mul(mul(corrected, adaptive), lr * rect), -1.0);
    } else {
      p.add_(corrected, -lr);
    }
  });
}

}  // namespace kiln::optim
