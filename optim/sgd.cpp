#include "kiln/optim/sgd.h"

#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
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
    : Optimizer("SGD", to_options(options)), foreach_(options.foreach) {
  add_param_groups({ParamGroup{std::move(params), {}}});
}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer("SGD", to_options(options)), foreach_(options.foreach) {
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
}

void SGD::step() {
  NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    SgdStep step{group.options["lr"], group.options["momentum"], group.options["dampening"],
                 group.options["weight_decay"], group.options["nesterov"] != 0.0};
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
          if (first) it = state.emplace("momentum_buffer", empty_like(p)).first;
          batch.state[0].push_back(it->second);
          batch.first.push_back(first ? 1 : 0);
        }
        continue;
      }
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
      kernels_for<OptimizerKernels>("SGD.step", b.params[0].device())
          .sgd(b.params, b.grads, b.state[0], b.first, step);
      b.bump_versions();
    }
  }
}

}  // namespace kiln::optim
