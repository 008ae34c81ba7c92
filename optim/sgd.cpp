#include "kiln/optim/sgd.h"

#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/ops/elementwise.h"

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

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : Optimizer("SGD", to_options(options)) {
  add_param_groups({ParamGroup{std::move(params), {}}});
}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer("SGD", to_options(options)) {
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
    const double lr = group.options["lr"], momentum = group.options["momentum"];
    const double dampening = group.options["dampening"],
                 weight_decay = group.options["weight_decay"];
    const bool nesterov = group.options["nesterov"] != 0.0;
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (weight_decay != 0) g = add(g, p, weight_decay);
      if (momentum != 0) {
        auto& state = state_of(p);
        auto it = state.find("momentum_buffer");
        if (it == state.end()) {
          it = state.emplace("momentum_buffer", g.clone()).first;
        } else {
          it->second.mul_(momentum).add_(g, 1.0 - dampening);
        }
        g = nesterov ? add(g, it->second, momentum) : it->second;
      }
      p.add_(g, -lr);
    }
  }
}

}  // namespace kiln::optim
