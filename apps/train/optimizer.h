// kiln-train's optimizer: the one place the recipe's flags (--optimizer, --lr, --momentum,
// --nesterov, --weight-decay, --cuda-graph) become typed options, when the run starts and again
// after a resume.
#pragma once

#include <memory>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/optim/optimizer.h"
#include "recipe.h"

namespace kiln::apps {

// SGD, Adam or AdamW as --optimizer names it, over `params`, with the recipe's options; a
// capturable one with --cuda-graph (a graph holds only capturable optimizers).
std::unique_ptr<optim::Optimizer> make_optimizer(const Recipe& r, std::vector<Tensor> params);

// After a resume has loaded the optimizer's state, whose options are the checkpoint's, puts this
// run's back into every group, so that the changes check_resume_recipe reported take effect: the
// weight decay, SGD's momentum and Nesterov flag (unless the schedule sets the momentum), and the
// learning rate when no schedule sets it (a schedule's rates come from this run's --lr already).
void apply_recipe_options(optim::Optimizer& optimizer, const Recipe& r, bool lr_scheduled,
                          bool momentum_scheduled);

}  // namespace kiln::apps
