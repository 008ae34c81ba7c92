#include "optimizer.h"

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/optim/adam.h"
#include "kiln/optim/sgd.h"

namespace kiln::apps {

namespace {

optim::SGDOptions sgd_options(const Recipe& r) {
  return {.lr = r.lr,
          .momentum = r.momentum,
          .weight_decay = r.weight_decay,
          .nesterov = r.nesterov,
          .capturable = r.cuda_graph};
}

optim::AdamOptions adam_options(const Recipe& r) {
  return {.lr = r.lr, .weight_decay = r.weight_decay, .capturable = r.cuda_graph};
}

optim::AdamWOptions adamw_options(const Recipe& r) {
  return {.lr = r.lr, .weight_decay = r.weight_decay, .capturable = r.cuda_graph};
}

}  // namespace

std::unique_ptr<optim::Optimizer> make_optimizer(const Recipe& r, std::vector<Tensor> params) {
  if (r.optimizer == "sgd") return std::make_unique<optim::SGD>(std::move(params), sgd_options(r));
  if (r.optimizer == "adam")
    return std::make_unique<optim::Adam>(std::move(params), adam_options(r));
  return std::make_unique<optim::AdamW>(std::move(params), adamw_options(r));
}

void apply_recipe_options(optim::Optimizer& optimizer, const Recipe& r, bool lr_scheduled,
                          bool momentum_scheduled) {
  for (std::size_t group = 0; group < optimizer.num_param_groups(); ++group) {
    if (auto* sgd = dynamic_cast<optim::SGD*>(&optimizer)) {
      const optim::SGDOptions recipe = sgd_options(r);
      optim::SGDOptions& o = sgd->options(group);
      o.weight_decay = recipe.weight_decay;
      o.nesterov = recipe.nesterov;
      if (!momentum_scheduled) o.momentum = recipe.momentum;
    } else if (auto* adam = dynamic_cast<optim::Adam*>(&optimizer)) {
      // Adam and AdamW: both take --weight-decay as it is.
      adam->options(group).weight_decay = adam_options(r).weight_decay;
    }
    if (!lr_scheduled) optimizer.set_lr(group, r.lr);
  }
  // A capturable optimizer's steps read the learning rate and momentum from the device.
  if (optimizer.capturable()) optimizer.copy_options_to_device();
}

}  // namespace kiln::apps
