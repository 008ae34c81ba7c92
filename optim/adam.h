// Adam and AdamW with PyTorch's update rule, bias-corrected, amsgrad optional:
//   Adam:  g = grad + weight_decay * p          AdamW: p = p * (1 - lr * weight_decay)
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2  (v_max = max(v_max, v) for
//   amsgrad) p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
#pragma once

#include <utility>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool foreach = true;  // as SGDOptions::foreach
  // A step a CUDA graph can hold (Optimizer::capturable): lr and beta1 read on the device, the
  // step counts kept there (0-dim f64 "step" state on the parameter's device), and GradScaler's
  // skip decided there. Needs the fused step (foreach, contiguous parameters and gradients).
  bool capturable = false;
};

// Adam(model.parameters()) takes PyTorch's defaults (lr 1e-3, betas 0.9 and 0.999, eps 1e-8).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});
  void step() override;
  void step_unless(const Tensor& found_inf) override;

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled);
  void check_options(const Options& options) const override;
  std::pair<const char*, const char*> device_option_names() const override {
    return {"lr", "beta1"};
  }

 private:
  void update(const Tensor& found_inf);
  bool decoupled_ = false;
  bool foreach_ = true;
};

// AdamW's options: Adam's, with PyTorch's weight_decay of 0.01 as the default, so that
// AdamW(params, {.lr = 3e-3}) still decays.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  bool amsgrad = false;
  bool foreach = true;
  bool capturable = false;
};

// Adam with decoupled weight decay (Loshchilov & Hutter).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
};

}  // namespace kiln::optim
