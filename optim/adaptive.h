// The adaptive-rate optimizers RMSprop, Adagrad, NAdam and RAdam, with PyTorch 1.13's update rules
// (its single-tensor code path), op by op on any device: no fused kernel, no capturable form.
//
// RMSprop:  g = grad + weight_decay * p
//           v = alpha v + (1 - alpha) g^2
//           centered: m = alpha m + (1 - alpha) g, d = sqrt(v - m^2) + eps; else d = sqrt(v) + eps
//           momentum: b = momentum b + g / d, p -= lr b; else p -= lr g / d
// Adagrad:  g = grad + weight_decay * p
//           s += g^2, p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(s) + eps)
#pragma once

#include <optional>
#include <vector>

#include "kiln/optim/typed_optimizer.h"

namespace kiln::optim {

struct RMSpropOptions {  // PyTorch's defaults
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
};

// A parameter group: its parameters and the options it sets; the others are the optimizer's. So
// for each optimizer below.
struct RMSpropParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{}, alpha{}, eps{}, weight_decay{}, momentum{};
  std::optional<bool> centered{};
};

class RMSprop : public TypedOptimizer<RMSpropOptions, RMSpropParamGroup> {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  RMSprop(std::vector<RMSpropParamGroup> groups, RMSpropOptions options = {});
  void step() override;

 protected:
  void check_options(const RMSpropOptions& options) const override;
};

struct AdagradOptions {  // PyTorch's defaults
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
};

struct AdagradParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{}, lr_decay{}, weight_decay{}, initial_accumulator_value{}, eps{};
};

class Adagrad : public TypedOptimizer<AdagradOptions, AdagradParamGroup> {
 public:
  Adagrad(std::vector<Tensor> params, AdagradOptions options = {});
  Adagrad(std::vector<AdagradParamGroup> groups, AdagradOptions options = {});
  void step() override;

 protected:
  void check_options(const AdagradOptions& options) const override;
};

struct NAdamOptions {  // PyTorch's defaults
  double lr = 2e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum_decay = 4e-3;
};

struct NAdamParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{}, beta1{}, beta2{}, eps{}, weight_decay{}, momentum_decay{};
};

// Adam with Nesterov momentum (Dozat), as PyTorch's NAdam: the momentum schedule
// mu_t = beta1 (1 - 0.96^(t momentum_decay) / 2) and its running product. The next step's product
// is PyTorch 2.0's, product * mu_next (1.13 multiplied mu in twice, a bug 2.0 fixed).
class NAdam : public TypedOptimizer<NAdamOptions, NAdamParamGroup> {
 public:
  NAdam(std::vector<Tensor> params, NAdamOptions options = {});
  NAdam(std::vector<NAdamParamGroup> groups, NAdamOptions options = {});
  void step() override;

 protected:
  void check_options(const NAdamOptions& options) const override;
};

struct RAdamOptions {  // PyTorch's defaults
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

struct RAdamParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr{}, beta1{}, beta2{}, eps{}, weight_decay{};
};

// Rectified Adam, as PyTorch 1.13's RAdam: plain momentum SGD while the variance's length
// rho_t is at most 5, the rectified adaptive step after.
class RAdam : public TypedOptimizer<RAdamOptions, RAdamParamGroup> {
 public:
  RAdam(std::vector<Tensor> params, RAdamOptions options = {});
  RAdam(std::vector<RAdamParamGroup> groups, RAdamOptions options = {});
  void step() override;

 protected:
  void check_options(const RAdamOptions& options) const override;
};

}  // namespace kiln::optim
