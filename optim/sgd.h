// SGD with momentum, dampening, Nesterov and weight decay, with PyTorch's update rule:
//   g = grad + weight_decay * p
//   buf = g (first step) or momentum * buf + (1 - dampening) * g
//   g = g + momentum * buf (Nesterov) or buf
//   p = p - lr * g
#pragma once

#include <optional>
#include <vector>

#include "kiln/optim/typed_optimizer.h"

namespace kiln::optim {

// PyTorch's defaults: SGD(model.parameters()) runs plain SGD at lr 1e-3.
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  // One fused pass per parameter and a few launches for all of them on a GPU (kernels/optim.h),
  // as PyTorch's foreach/fused; false: the update op by op. The two agree to an ulp or so per step
  // (kernels/optim.h). A parameter whose gradient or state is not laid out as it is (contiguous
  // or channels-last, the same for all) goes op by op.
  bool foreach = true;
  // A step a CUDA graph can hold (Optimizer::capturable): lr and momentum read on the device, and
  // GradScaler's skip decided there. Needs the fused step (foreach, contiguous parameters and
  // gradients), and with momentum a dampening of 0: a buffer's first step, which the device may
  // skip unseen by the host, then equals a later one from a zero buffer. The optimizer's, as made:
  // every group has the constructor's.
  bool capturable = false;
};

// A parameter group: its parameters and the options it sets; the others are the optimizer's.
struct SGDParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{}, momentum{}, dampening{}, weight_decay{};
  std::optional<bool> nesterov{};
};

class SGD : public TypedOptimizer<SGDOptions, SGDParamGroup> {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  SGD(std::vector<SGDParamGroup> groups, SGDOptions options = {});
  void step() override;
  void step_unless(const Tensor& found_inf) override;

 protected:
  void check_options(const SGDOptions& options) const override;

 private:
  void update(const Tensor& found_inf);
};

}  // namespace kiln::optim
