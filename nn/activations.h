// Activation modules beyond nn/layers.h's ReLU, GELU, SiLU, Sigmoid and Tanh, with PyTorch's names,
// defaults and (for PReLU) state dict.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/nn/module.h"

namespace kiln::nn {

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;

 private:
  double negative_slope_;
};

class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha_(alpha) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ELU"; }
  std::string extra_repr() const override;

 private:
  double alpha_;
};

class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0)
      : beta_(beta), threshold_(threshold) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Softplus"; }
  std::string extra_repr() const override;

 private:
  double beta_, threshold_;
};

class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Hardswish"; }
};

// weight [num_parameters], starting at init (PyTorch's 0.25).
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "PReLU"; }
  std::string extra_repr() const override;
  Tensor weight;
};

class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim_(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Softmax"; }
  std::string extra_repr() const override;

 private:
  int64_t dim_;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim_(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override;

 private:
  int64_t dim_;
};

}  // namespace kiln::nn
