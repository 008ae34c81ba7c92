// The layers: each a Module holding its parameters and calling one op from ops.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "kiln/nn/module.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/dropout.h"
#include "kiln/ops/normalization.h"
#include "kiln/ops/pooling.h"

namespace kiln::nn {

// y = x Wᵀ + b; W [out, in] and b [out] start as U(-1/sqrt(in), 1/sqrt(in)), as PyTorch.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  int64_t in_features_, out_features_;
};

struct Conv2dOptions {
  Pair stride = {1, 1};
  Pair padding = {0, 0};
  Pair dilation = {1, 1};
  int64_t groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  // kernel_size 3 means 3x3 (a Pair takes one integer for both sides).
  Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, Conv2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  int64_t in_channels_, out_channels_;
  Pair kernel_size_;
  Conv2dOptions options_;
};

// PyTorch's defaults.
struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;  // running = (1 - momentum) running + momentum batch
  bool affine = true;     // a learned weight and bias per channel
  // Running mean and variance, used in eval mode; without them eval normalises with the batch's.
  bool track_running_stats = true;
};

// BatchNorm over dim 1 of [N, C] / [N, C, L] (BatchNorm1d) or [N, C, H, W] (BatchNorm2d):
// nn::BatchNorm2d bn(64) or bn(64, {.momentum = 0.01, .affine = false}).
class BatchNorm : public Module {
 public:
  // expected_dims: 2 for BatchNorm1d (which also takes [N, C, L]), 4 for BatchNorm2d.
  BatchNorm(int64_t num_features, int expected_dims, BatchNormOptions options = {});
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) as one op: batch_norm_relu, whose CPU kernels fold the ReLU into batch
  // norm's passes. The ResNet blocks call it after their convolutions.
  Tensor forward_relu(const Tensor& x);
  // relu(forward(x) + residual) as one op: batch_norm_add_relu, whose GPU kernels fuse the add and
  // the ReLU into batch norm's passes. The ResNet blocks end with it.
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  std::string name() const override { return expected_dims_ == 4 ? "BatchNorm2d" : "BatchNorm1d"; }
  std::string extra_repr() const override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

  // Batch statistics over every process of a data-parallel job (SyncBatchNorm): `sum_over_ranks`
  // is a differentiable sum over the ranks of a 1-D tensor (dist::convert_sync_batchnorm sets
  // it). In training, the mean and variance are then the global batch's, in two reductions (sums
  // and counts, then squared deviations from the global mean), and backward flows through both.
  // Unset (the default): each process normalises with its own batch's statistics.
  using StatisticsSum = std::function<Tensor(const Tensor&)>;
  void sync_statistics(StatisticsSum sum_over_ranks) {
    sum_over_ranks_ = std::move(sum_over_ranks);
  }
  bool syncs_statistics() const { return static_cast<bool>(sum_over_ranks_); }

 private:
  // The epilogue after the normalisation: nothing, relu, or relu(y + residual).
  struct Epilogue {
    bool relu = false;
    Tensor residual{};
  };
  Tensor run(const Tensor& x, const Epilogue& epilogue);
  Tensor run_synced(const Tensor& x, const Epilogue& epilogue);
  StatisticsSum sum_over_ranks_;
  int64_t num_features_;
  int expected_dims_;
  double eps_, momentum_;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm(num_features, 2, options) {}
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm(num_features, 4, options) {}
};

struct LayerNormOptions {  // PyTorch's defaults
  double eps = 1e-5;
  bool elementwise_affine = true;  // a learned weight and bias of normalized_shape
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, LayerNormOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  Shape normalized_shape_;
  double eps_;
};

// Rows of weight [num_embeddings, embedding_dim], from N(0, 1); the padding_idx row starts at zero
// and gets no gradient (-1: no padding row).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx = -1);
  Tensor forward(const Tensor& indices) override;
  std::string name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Tensor weight;

 private:
  int64_t num_embeddings_, embedding_dim_, padding_idx_;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return dropout(x, p_, is_training()); }
  std::string name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p() const { return p_; }

 private:
  double p_;
};

// Zeroes whole channels of [N, C, H, W] with probability p (ops/dropout.h's dropout2d).
class Dropout2d : public Dropout {
 public:
  explicit Dropout2d(double p = 0.5) : Dropout(p) {}
  Tensor forward(const Tensor& x) override { return dropout2d(x, p(), is_training()); }
  std::string name() const override { return "Dropout2d"; }
};

// stride 0 means the kernel size, as PyTorch's default stride=None.
struct MaxPool2dOptions {
  Pair stride = 0;
  Pair padding = 0;
  Pair dilation = 1;
  bool ceil_mode = false;
};

// nn::MaxPool2d pool(2) or pool(3, {.stride = 2, .padding = 1}), as torch.nn.MaxPool2d.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pair kernel_size, MaxPool2dOptions options = {})
      : kernel_size_(kernel_size), options_(options) {}
  Tensor forward(const Tensor& x) override {
    return max_pool2d(x, kernel_size_, options_.stride, options_.padding, options_.dilation,
                      options_.ceil_mode);
  }
  std::string name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;

 private:
  Pair kernel_size_;
  MaxPool2dOptions options_;
};

struct AvgPool2dOptions {
  Pair stride = 0;  // 0: the kernel size
  Pair padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pair kernel_size, AvgPool2dOptions options = {})
      : kernel_size_(kernel_size), options_(options) {}
  Tensor forward(const Tensor& x) override {
    return avg_pool2d(x, kernel_size_, options_.stride, options_.padding, options_.ceil_mode,
                      options_.count_include_pad);
  }
  std::string name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;

 private:
  Pair kernel_size_;
  AvgPool2dOptions options_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Pair output_size) : output_size_(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size_); }
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;

 private:
  Pair output_size_;
};

class AdaptiveMaxPool2d : public Module {
 public:
  explicit AdaptiveMaxPool2d(Pair output_size) : output_size_(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_max_pool2d(x, output_size_); }
  std::string name() const override { return "AdaptiveMaxPool2d"; }
  std::string extra_repr() const override;

 private:
  Pair output_size_;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }
  std::string name() const override { return "Flatten"; }

 private:
  int64_t start_, end_;
};

class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string name() const override { return "Identity"; }
};

// Activations: stateless modules over the elementwise ops.
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ReLU"; }
};
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none") : approximate_(std::move(approximate)) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GELU"; }

 private:
  std::string approximate_;
};
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "SiLU"; }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sigmoid"; }
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Tanh"; }
};

}  // namespace kiln::nn
