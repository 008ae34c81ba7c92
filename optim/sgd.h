// SGD with momentum, dampening, Nesterov and weight decay, with PyTorch's update rule:
//   g = grad + weight_decay * p
//   buf = g (first step) or momentum * buf + (1 - dampening) * g
//   g = g + momentum * buf (Nesterov) or buf
//   p = p - lr * g
#pragma once

#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// PyTorch's defaults: SGD(model.parameters()) runs plain SGD at lr 1e-3.
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  SGD(std::vector<ParamGroup> groups, SGDOptions options = {});
  void step() override;

 protected:
  void check_options(const Options& options) const override;
};

}  // namespace kiln::optim
