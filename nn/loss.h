// Losses as modules, as torch.nn.CrossEntropyLoss and friends: configured once, called with
// (input, target).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "kiln/nn/module.h"
#include "kiln/ops/loss.h"

namespace kiln::nn {

struct CrossEntropyLossOptions {
  Tensor weight{};  // per-class weights [C], or undefined
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;
};

class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyLossOptions options = {}) : options_(std::move(options)) {}
  Tensor operator()(const Tensor& logits, const Tensor& target) const {
    return cross_entropy(logits, target, options_.weight, options_.ignore_index, options_.reduction,
                         options_.label_smoothing);
  }
  std::string name() const override { return "CrossEntropyLoss"; }

 private:
  CrossEntropyLossOptions options_;
};

class NLLLoss : public Module {
 public:
  explicit NLLLoss(Tensor weight = Tensor(), int64_t ignore_index = -100,
                   Reduction reduction = Reduction::mean)
      : weight_(std::move(weight)), ignore_index_(ignore_index), reduction_(reduction) {}
  Tensor operator()(const Tensor& log_probs, const Tensor& target) const {
    return nll_loss(log_probs, target, weight_, ignore_index_, reduction_);
  }
  std::string name() const override { return "NLLLoss"; }

 private:
  Tensor weight_;
  int64_t ignore_index_;
  Reduction reduction_;
};

class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::mean) : reduction_(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return mse_loss(input, target, reduction_);
  }
  std::string name() const override { return "MSELoss"; }

 private:
  Reduction reduction_;
};

}  // namespace kiln::nn
