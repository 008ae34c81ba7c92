// Losses as modules, as torch.nn.CrossEntropyLoss and friends: configured once, called with
// (input, target), or as module({input, target}) with the module's hooks around the call.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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
  using Module::operator();
  // module({logits, target}), with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override {
    expect_inputs(inputs, 2);
    return (*this)(inputs[0], inputs[1]);
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
  using Module::operator();
  // module({log_probs, target}), with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override {
    expect_inputs(inputs, 2);
    return (*this)(inputs[0], inputs[1]);
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
  using Module::operator();
  // module({input, target}), with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override {
    expect_inputs(inputs, 2);
    return (*this)(inputs[0], inputs[1]);
  }
  std::string name() const override { return "MSELoss"; }

 private:
  Reduction reduction_;
};

// The pointwise losses of ops/loss.h as modules, with PyTorch's names and defaults.
class L1Loss : public Module {
 public:
  explicit L1Loss(Reduction reduction = Reduction::mean) : reduction_(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return l1_loss(input, target, reduction_);
  }
  using Module::operator();
  // module({input, target}), with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override {
    expect_inputs(inputs, 2);
    return (*this)(inputs[0], inputs[1]);
  }
  std::string name() const override { return "L1Loss"; }

 private:
  Reduction reduction_;
};

class SmoothL1Loss : public Module {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::mean, double beta = 1.0)
      : reduction_(reduction), beta_(beta) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return smooth_l1_loss(input, target, reduction_, beta_);
  }
  using Module::operator();
  // module({input, target}), with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override {
    expect_inputs(inputs, 2);
    return (*this)(inputs[0], inputs[1]);
  }
  std::string name() const override { return "SmoothL1Loss"; }

 private:
  Reduction reduction_;
  double beta_;
};

class HuberLoss : public Module {
 public:
  explicit HuberLoss(Reduction reduction = Reduction::mean, double delta = 1.0)
      : reduction_(reduction), delta_(delta) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return huber_loss(input, target, reduction_, delta_);
  }
  using Module::operator();
  // module({input, target}), with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override {
    expect_inputs(inputs, 2);
    return (*this)(inputs[0], inputs[1]);
  }
  std::string name() const override { return "HuberLoss"; }

 private:
  Reduction reduction_;
  double delta_;
};

class BCELoss : public Module {
 public:
  explicit BCELoss(Tensor weight = Tensor(), Reduction reduction = Reduction::mean)
      : weight_(std::move(weight)), reduction_(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return binary_cross_entropy(input, target, weight_, reduction_);
  }
  using Module::operator();
  // module({input, target}), with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override {
    expect_inputs(inputs, 2);
    return (*this)(inputs[0], inputs[1]);
  }
  std::string name() const override { return "BCELoss"; }

 private:
  Tensor weight_;
  Reduction reduction_;
};

struct BCEWithLogitsLossOptions {
  Tensor weight{};  // per element, broadcast
  Reduction reduction = Reduction::mean;
  Tensor pos_weight{};  // per class [C], on the positive term
};

class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(BCEWithLogitsLossOptions options = {})
      : options_(std::move(options)) {}
  Tensor operator()(const Tensor& logits, const Tensor& target) const {
    return binary_cross_entropy_with_logits(logits, target, options_.weight, options_.reduction,
                                            options_.pos_weight);
  }
  using Module::operator();
  // module({logits, target}), with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override {
    expect_inputs(inputs, 2);
    return (*this)(inputs[0], inputs[1]);
  }
  std::string name() const override { return "BCEWithLogitsLoss"; }

 private:
  BCEWithLogitsLossOptions options_;
};

class KLDivLoss : public Module {
 public:
  explicit KLDivLoss(Reduction reduction = Reduction::mean, bool log_target = false)
      : reduction_(reduction), log_target_(log_target) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return kl_div(input, target, reduction_, log_target_);
  }
  using Module::operator();
  // module({input, target}), with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override {
    expect_inputs(inputs, 2);
    return (*this)(inputs[0], inputs[1]);
  }
  std::string name() const override { return "KLDivLoss"; }

 private:
  Reduction reduction_;
  bool log_target_;
};

class CosineEmbeddingLoss : public Module {
 public:
  explicit CosineEmbeddingLoss(double margin = 0.0, Reduction reduction = Reduction::mean)
      : margin_(margin), reduction_(reduction) {}
  Tensor operator()(const Tensor& input1, const Tensor& input2, const Tensor& target) const {
    return cosine_embedding_loss(input1, input2, target, margin_, reduction_);
  }
  using Module::operator();
  // module({input1, input2, target}), with the hooks around it.
  Tensor forward_many(const std::vector<Tensor>& inputs) override {
    expect_inputs(inputs, 3);
    return (*this)(inputs[0], inputs[1], inputs[2]);
  }
  std::string name() const override { return "CosineEmbeddingLoss"; }

 private:
  double margin_;
  Reduction reduction_;
};

}  // namespace kiln::nn
