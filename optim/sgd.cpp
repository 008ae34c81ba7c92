#include "kiln/optim/sgd.h"

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
Options to_options(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0}};
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer("SGD", to_options(options), options.capturable), foreach_(options.foreach) {
  KILN_CHECK(!options.capturable || options.foreach, ValueError,
             "SGD: capturable needs the fused step (foreach = true)");
  add_param_groups(std::move(groups));
}

void SGD::check_options(const Options& o) const {
  const double lr = o.at("lr"), momentum = o.at("momentum"), weight_decay = o.at("weight_decay");
  KILN_CHECK(lr >= 0 && momentum >= 0 && weight_decay >= 0, ValueError,
             "SGD: lr, momentum and weight_decay must be non-negative, got {}, {}, {}", lr,
             momentum, weight_decay);
  KILN_CHECK(o.at("nesterov") == 0.0 || (momentum > 0 && o.at("dampening") == 0), ValueError,
             "SGD: Nesterov momentum requires a momentum and zero dampening, got momentum {} and "
             "dampening {}",
             momentum, o.at("dampening"));
  KILN_CHECK(!capturable() || momentum == 0 || o.at("dampening") == 0, ValueError,
             "SGD: capturable with momentum needs dampening 0, got {} (a buffer's first step, "
             "which the GradScaler may skip on the device unseen by the host, must equal a later "
             "one from a zero buffer)",
             o.at("dampening"));
}

void SGD::step() {
  update(Tensor());
}

void SGD::step_unless(const Tensor& found_inf) {
  if (!capturable()) Optimizer::step_unless(found_inf);
  update(found_inf);
}

void SGD::update(const Tensor& found_inf) {
  const OpNameScope op_name("SGD.step");
  NoGradGuard no_grad;
  for (size_t group_index = 0; group_index < param_groups().size(); ++group_index) {
    auto& group = param_groups()[group_index];
    SgdStep step{group.options["lr"], group.options["momentum"], group.options["dampening"],
                 group.options["weight_decay"], group.options["nesterov"] != 0.0};
    if (capturable()) refresh_device_options(group_index);
    FusedBatches batches;
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      auto& state = state_of(p);
      auto it = state.find("momentum_buffer");
      const Tensor buffer = it == state.end() ? Tensor() : it->second;
      if (foreach_ && fusable(p, g, {&buffer})) {
        FusedBatch& batch = batches.of(p);
        batch.params.push_back(p);
        batch.grads.push_back(g);
        if (step.momentum != 0) {
          const bool first = it == state.end();
          // Zeros when capturable: a first step the device skips leaves a buffer the next step
          // reads as a later one's.
          if (first)
            it = state.emplace("momentum_buffer", capturable() ? zeros_like(p) : empty_like(p))
                     .first;
          batch.state[0].push_back(it->second);
          batch.first.push_back(first ? 1 : 0);
        }
        continue;
      }
      KILN_CHECK(!capturable(), ValueError,
                 "SGD: capturable needs the fused step, which takes contiguous parameters, "
                 "gradients and buffers of one dtype; got a parameter {} with gradient {}",
                 describe(p), describe(g));
      if (step.weight_decay != 0) g = add(g, p, step.weight_decay);
      if (step.momentum != 0) {
        if (it == state.end()) {
          it = state.emplace("momentum_buffer", g.clone()).first;
        } else {
          it->second.mul_(step.momentum).add_(g, 1.0 - step.dampening);
        }
        g = step.nesterov ? add(g, it->second, step.momentum) : it->second;
      }
      p.add_(g, -step.lr);
    }
    for (FusedBatch& b : batches.all) {
      profiler::OpScope event("SGD::fused_step", b.device, b.param_bytes());
      DeviceStep device;
      if (capturable()) {
        device.options = device_options(group_index, b.device);
        device.found_inf = checked_found_inf(name(), found_inf, b.device);
      }
      kernels_for<OptimizerKernels>("SGD.step", b.params[0].device())
          .sgd(b.params, b.grads, b.state[0], b.first, step, device);
      b.bump_versions();
    }
  }
}

}  // namespace kiln::optim
