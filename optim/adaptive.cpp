#include "kiln/optim/adaptive.h"

#include <cmath>
#include <cstddef>
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

}  // namespace kiln::optim
