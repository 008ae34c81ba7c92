#include "kiln/optim/adam.h"

#include <cmath>
#include <cstddef>
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
Options to_options(const AdamOptions& o) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0}};
}
std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  return {ParamGroup{std::move(params), {}}};
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(one_group(std::move(params)), options, false) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam(std::move(groups), options, false) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled)
    : Optimizer(decoupled ? "AdamW" : "Adam", to_options(options), options.capturable),
      decoupled_(decoupled),
      foreach_(options.foreach) {
  KILN_CHECK(!options.capturable || options.foreach, ValueError,
             "{}: capturable needs the fused step (foreach = true)", name());
  add_param_groups(std::move(groups));
}

namespace {
AdamOptions as_adam(const AdamWOptions& o) {
  return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad, o.foreach, o.capturable};
}
}  // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(one_group(std::move(params)), as_adam(options), true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Adam(std::move(groups), as_adam(options), true) {}

void Adam::check_options(const Options& o) const {
  const double lr = o.at("lr"), eps = o.at("eps"), weight_decay = o.at("weight_decay");
  const double beta1 = o.at("beta1"), beta2 = o.at("beta2");
  KILN_CHECK(lr >= 0 && eps >= 0 && weight_decay >= 0, ValueError,
             "{}: lr, eps and weight_decay must be non-negative, got {}, {}, {}", name(), lr, eps,
             weight_decay);
  KILN_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, ValueError,
             "{}: betas must be in [0, 1), got ({}, {})", name(), beta1, beta2);
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
  for (size_t group_index = 0; group_index < param_groups().size(); ++group_index) {
    auto& group = param_groups()[group_index];
    const double lr = group.options["lr"], beta1 = group.options["beta1"],
                 beta2 = group.options["beta2"];
    const double eps = group.options["eps"], weight_decay = group.options["weight_decay"];
    const bool amsgrad = group.options["amsgrad"] != 0.0;
    if (capturable()) refresh_device_options(group_index);
    FusedBatches batches;
    for (Tensor& p : group.params) {
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
      if (foreach_ && fusable(p, g, {&m, &v, &v_max})) {
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
      const AdamStep step{lr,
                          beta1,
                          beta2,
                          eps,
                          weight_decay,
                          decoupled_,
                          amsgrad,
                          1.0 - std::pow(beta1, b.step),
                          1.0 - std::pow(beta2, b.step)};
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
