// Adam and AdamW with PyTorch's update rule, bias-corrected, amsgrad optional:
//   Adam:  g = grad + weight_decay * p          AdamW: p = p * (1 - lr * weight_decay)
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2  (v_max = max(v_max, v) for
//   amsgrad) p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
#pragma once

#include <optional>
#include <vector>

#include "kiln/optim/typed_optimizer.h"

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
  // skip decided there. Needs the fused step (foreach, contiguous parameters and gradients). The
  // optimizer's, as made: every group has the constructor's.
  bool capturable = false;
};

// A parameter group of Adam or AdamW: its parameters and the options it sets; the others are the
// optimizer's.
struct AdamParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{}, beta1{}, beta2{}, eps{}, weight_decay{};
  std::optional<bool> amsgrad{};
};

// Adam(model.parameters()) takes PyTorch's defaults (lr 1e-3, betas 0.9 and 0.999, eps 1e-8).
class Adam : public TypedOptimizer<AdamOptions, AdamParamGroup> {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  Adam(std::vector<AdamParamGroup> groups, AdamOptions options = {});
  void step() override;
  void step_unless(const Tensor& found_inf) override;

 protected:
  Adam(std::vector<AdamParamGroup> groups, AdamOptions options, bool decoupled);
  void check_options(const AdamOptions& options) const override;

 private:
  void update(const Tensor& found_inf);
  bool decoupled_ = false;
};

// AdamW's options: Adam's, with PyTorch's weight_decay of 0.01 as the default, so that
// AdamW(params, {.lr = 3e-3}) still decays. Its groups hold them as AdamOptions.
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
  AdamW(std::vector<AdamParamGroup> groups, AdamWOptions options = {});
};

}  // namespace kiln::optim
