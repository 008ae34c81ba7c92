#include "kiln/optim/adam.h"

#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/op_name.h"
#include "kiln/core/profiler.h"
#include "kiln/kernels/optim.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/optim/fused.h"

namespace kiln::optim {

namespace {
using Group = AdamParamGroup;
// The state dict's names: PyTorch's, with its betas pair as beta1 and beta2.
constexpr std::array kFields{
    number_option("lr", &AdamOptions::lr, &Group::lr),
    number_option("beta1", &AdamOptions::beta1, &Group::beta1),
    number_option("beta2", &AdamOptions::beta2, &Group::beta2),
    number_option("eps", &AdamOptions::eps, &Group::eps),
    number_option("weight_decay", &AdamOptions::weight_decay, &Group::weight_decay),
    flag_option("amsgrad", &AdamOptions::amsgrad, &Group::amsgrad),
};

std::vector<Group> one_group(std::vector<Tensor> params) {
  return {{.params = std::move(params)}};
}

AdamOptions as_adam(const AdamWOptions& o) {
  return {.lr = o.lr,
          .beta1 = o.beta1,
          .beta2 = o.beta2,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .amsgrad = o.amsgrad,
          .foreach = o.foreach,
          .capturable = o.capturable};
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(one_group(std::move(params)), options, false) {}
Adam::Adam(std::vector<Group> groups, AdamOptions options)
    : Adam(std::move(groups), options, false) {}
Adam::Adam(std::vector<Group> groups, AdamOptions options, bool decoupled)
    : TypedOptimizer(decoupled ? "AdamW" : "Adam", options, kFields, options.capturable),
      decoupled_(decoupled) {
  add_param_groups(std::move(groups));
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(one_group(std::move(params)), as_adam(options), true) {}
AdamW::AdamW(std::vector<Group> groups, AdamWOptions options)
    : Adam(std::move(groups), as_adam(options), true) {}

void Adam::check_options(const AdamOptions& o) const {
  KILN_CHECK(o.lr >= 0 && o.eps >= 0 && o.weight_decay >= 0, ValueError,
             "{}: lr, eps and weight_decay must be non-negative, got {}, {}, {}", name(), o.lr,
             o.eps, o.weight_decay);
  KILN_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, ValueError,
             "{}: betas must be in [0, 1), got ({}, {})", name(), o.beta1, o.beta2);
  KILN_CHECK(o.capturable == capturable(), ValueError,
             "{}: capturable is the optimizer's, set when it is made ({}); a group's cannot "
             "differ",
             name(), capturable());
  KILN_CHECK(!o.capturable || o.foreach, ValueError,
             "{}: capturable needs the fused step (foreach = true)", name());
}

void Adam::step() {
  update(Tensor());
}

void Adam::step_unless(const Tensor& found_inf) {
  if (!capturable()) Optimizer::step_unless(found_inf);
  update(found_inf);
}

void Adam::update(const Tensor& found_inf) {
  const OpNameScope op_name(decoupled_ ? "AdamW.step" : "Adam.step");
  NoGradGuard no_grad;
  for (size_t group_index = 0; group_index < num_param_groups(); ++group_index) {
    const AdamOptions& o = checked_options(group_index);
    const double lr = o.lr, beta1 = o.beta1, beta2 = o.beta2, eps = o.eps;
    const double weight_decay = o.weight_decay;
    const bool amsgrad = o.amsgrad;
    if (capturable()) refresh_device_options(group_index);
    FusedBatches batches;
    const std::string optimizer = name();  // once per group, not per parameter
    for (Tensor p : params(group_index)) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      auto& state = state_of(p);
      if (state.empty()) {
        // A capturable step counts on the device, where the graph reads and advances it.
        state["step"] = zeros({}, DType::f64, capturable() ? p.device() : Device::cpu());
        state["exp_avg"] = zeros_like(p);
        state["exp_avg_sq"] = zeros_like(p);
      }
      // Created apart from the rest: amsgrad may be switched on for a group that already has state.
      if (amsgrad && !state.count("max_exp_avg_sq")) state["max_exp_avg_sq"] = zeros_like(p);
      Tensor& step_count = state["step"];
      if (capturable()) {
        // A loaded checkpoint's count may be elsewhere (before the capture, this copy is fine).
        if (step_count.device() != p.device()) step_count = step_count.to(p.device());
        const Tensor v_max = amsgrad ? state["max_exp_avg_sq"] : Tensor();
        KILN_CHECK(fusable(p, g, {&state["exp_avg"], &state["exp_avg_sq"], &v_max}), ValueError,
                   "{}: capturable needs the fused step, which takes contiguous parameters, "
                   "gradients and state of one dtype; got a parameter {} with gradient {}",
                   name(), describe(p), describe(g));
        FusedBatch& batch = batches.of(p);
        batch.params.push_back(p);
        batch.grads.push_back(g);
        batch.state[0].push_back(state["exp_avg"]);
        batch.state[1].push_back(state["exp_avg_sq"]);
        if (amsgrad) batch.state[2].push_back(v_max);
        batch.steps.push_back(step_count);
        continue;
      }
      step_count.add_(1.0);
      const double t = step_count.item<double>();
      Tensor& m = state["exp_avg"];
      Tensor& v = state["exp_avg_sq"];
      const Tensor v_max = amsgrad ? state["max_exp_avg_sq"] : Tensor();
      if (o.foreach && fuses_on(p.device(), capturable(), optimizer.c_str()) &&
          fusable(p, g, {&m, &v, &v_max})) {
        FusedBatch& batch = batches.of(p, t);
        batch.params.push_back(p);
        batch.grads.push_back(g);
        batch.state[0].push_back(m);
        batch.state[1].push_back(v);
        if (amsgrad) batch.state[2].push_back(v_max);
        continue;
      }
      if (weight_decay != 0) {
        if (decoupled_)
          p.mul_(1.0 - lr * weight_decay);
        else
          g = add(g, p, weight_decay);
      }
      m.mul_(beta1).add_(g, 1.0 - beta1);
      v.mul_(beta2).add_(mul(g, g), 1.0 - beta2);
      const double bias1 = 1.0 - std::pow(beta1, t), bias2 = 1.0 - std::pow(beta2, t);
      Tensor second = v;
      if (amsgrad) {
        Tensor& v_max_state = state["max_exp_avg_sq"];
        v_max_state.copy_(maximum(v_max_state, v));
        second = v_max_state;
      }
      Tensor denom = add(div(sqrt(second), std::sqrt(bias2)), eps);
      p.add_(div(m, denom), -lr / bias1);
    }
    for (FusedBatch& b : batches.all) {
      const AdamStep step{.lr = lr,
                          .beta1 = beta1,
                          .beta2 = beta2,
                          .eps = eps,
                          .weight_decay = weight_decay,
                          .decoupled = decoupled_,
                          .amsgrad = amsgrad,
                          .bias1 = 1.0 - std::pow(beta1, b.step),
                          .bias2 = 1.0 - std::pow(beta2, b.step)};
      profiler::OpScope event(decoupled_ ? "AdamW::fused_step" : "Adam::fused_step", b.device,
                              b.param_bytes());
      DeviceStep device;
      if (capturable()) {
        device.options = device_options(group_index, b.device);
        device.found_inf = checked_found_inf(name(), found_inf, b.device);
        device.steps = b.steps;
      }
      kernels_for<OptimizerKernels>("Adam.step", b.device)
          .adam(b.params, b.grads, b.state[0], b.state[1], b.state[2], step, device);
      b.bump_versions();
    }
  }
}

}  // namespace kiln::optim
