// GroupNorm and InstanceNorm1d/2d with PyTorch's names, defaults and state dicts.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/nn/module.h"

namespace kiln::nn {

struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;  // weight (ones) and bias (zeros), one per channel
};

// x [N, C, ...] normalised over groups of C / num_groups channels (ops/normalization.h).
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  int64_t num_groups_, num_channels_;
  GroupNormOptions options_;
};

struct InstanceNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = false;               // PyTorch's default, unlike BatchNorm's
  bool track_running_stats = false;  // running_mean, running_var, num_batches_tracked
};

// x normalised per sample and channel; in eval mode with track_running_stats, by the running
// statistics instead. expected_dims: 3 ([N, C, L], InstanceNorm1d) or 4 ([N, C, H, W]).
class InstanceNorm : public Module {
 public:
  InstanceNorm(int64_t num_features, int expected_dims, InstanceNormOptions options);
  Tensor forward(const Tensor& x) override;
  std::string name() const override {
    return expected_dims_ == 4 ? "InstanceNorm2d" : "InstanceNorm1d";
  }
  std::string extra_repr() const override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  int64_t num_features_;
  int expected_dims_;
  InstanceNormOptions options_;
};

class InstanceNorm1d : public InstanceNorm {
 public:
  explicit InstanceNorm1d(int64_t num_features, InstanceNormOptions options = {})
      : InstanceNorm(num_features, 3, options) {}
};

class InstanceNorm2d : public InstanceNorm {
 public:
  explicit InstanceNorm2d(int64_t num_features, InstanceNormOptions options = {})
      : InstanceNorm(num_features, 4, options) {}
};

}  // namespace kiln::nn
