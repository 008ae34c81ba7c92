#include "kiln/optim/sgd.h"

#include <array>
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
using Group = SGDParamGroup;
// The state dict's names, as PyTorch's SGD names them.
constexpr std::array kFields{
    number_option("lr", &SGDOptions::lr, &Group::lr),
    number_option("momentum", &SGDOptions::momentum, &Group::momentum),
    number_option("dampening", &SGDOptions::dampening, &Group::dampening),
    number_option("weight_decay", &SGDOptions::weight_decay, &Group::weight_decay),
    flag_option("nesterov", &SGDOptions::nesterov, &Group::nesterov),
};
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<Group>{{.params = std::move(params)}}, options) {}

SGD::SGD(std::vector<Group> groups, SGDOptions options)
    : TypedOptimizer("SGD", options, kFields, options.capturable) {
  add_param_groups(std::move(groups));
}

void SGD::check_options(const SGDOptions& o) const {
  KILN_CHECK(o.lr >= 0 && o.momentum >= 0 && o.weight_decay >= 0, ValueError,
             "SGD: lr, momentum and weight_decay must be non-negative, got {}, {}, {}", o.lr,
             o.momentum, o.weight_decay);
  KILN_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), ValueError,
             "SGD: Nesterov momentum requires a momentum and zero dampening, got momentum {} and "
             "dampening {}",
             o.momentum, o.dampening);
  KILN_CHECK(o.capturable == capturable(), ValueError,
             "SGD: capturable is the optimizer's, set when it is made ({}); a group's cannot "
             "differ",
             capturable());
  KILN_CHECK(!o.capturable || o.foreach, ValueError,
             "SGD: capturable needs the fused step (foreach = true)");
  KILN_CHECK(!o.capturable || o.momentum == 0 || o.dampening == 0, ValueError,
             "SGD: capturable with momentum needs dampening 0, got {} (a buffer's first step, "
             "which the GradScaler may skip on the device unseen by the host, must equal a later "
             "one from a zero buffer)",
             o.dampening);
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
  for (size_t group_index = 0; group_index < num_param_groups(); ++group_index) {
    const SGDOptions& o = checked_options(group_index);
    const SgdStep step{.lr = o.lr,
                       .momentum = o.momentum,
                       .dampening = o.dampening,
                       .weight_decay = o.weight_decay,
                       .nesterov = o.nesterov};
    if (capturable()) refresh_device_options(group_index);
    FusedBatches batches;
    for (Tensor p : params(group_index)) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      auto& state = state_of(p);
      auto it = state.find("momentum_buffer");
      const Tensor buffer = it == state.end() ? Tensor() : it->second;
      if (o.foreach && fuses_on(p.device(), capturable(), "SGD.step") && fusable(p, g, {&buffer})) {
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
