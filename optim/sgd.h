// SGD with momentum, dampening, Nesterov and weight decay, with PyTorch's update rule:
//   g = grad + weight_decay * p
//   buf = g (first step) or momentum * buf + (1 - dampening) * g
//   g = g + momentum * buf (Nesterov) or buf
//   p = p - lr * g
#pragma once

#include <utility>
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
  // One fused pass per parameter and a few launches for all of them on a GPU (kernels/optim.h),
  // as PyTorch's foreach/fused; false: the update op by op. The two agree to an ulp or so per step
  // (kernels/optim.h). A parameter whose gradient or state is not laid out as it is (contiguous
  // or channels-last, the same for all) goes op by op.
  bool foreach = true;
  // A step a CUDA graph can hold (Optimizer::capturable): lr and momentum read on the device, and
  // GradScaler's skip decided there. Needs the fused step (foreach, contiguous parameters and
  // gradients), and with momentum a dampening of 0: a buffer's first step, which the device may
  // skip unseen by the host, then equals a later one from a zero buffer.
  bool capturable = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  SGD(std::vector<ParamGroup> groups, SGDOptions options = {});
  void step() override;
  void step_unless(const Tensor& found_inf) override;

 protected:
  void check_options(const Options& options) const override;
  std::pair<const char*, const char*> device_option_names() const override {
    return {"lr", "momentum"};
  }

 private:
  void update(const Tensor& found_inf);
  bool foreach_ = true;
};

}  // namespace kiln::optim
