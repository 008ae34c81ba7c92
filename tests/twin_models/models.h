// The two small models of compare_twin_models.py, written as its PyTorch twins are: a U-Net-style
// segmenter (convolutions, GroupNorm, a strided down step, ConvTranspose2d up, a skip joined with
// cat) and an LSTM sequence classifier (the last step's output through a linear head).
#pragma once

#include <memory>

#include "kiln/kiln.h"

namespace kiln::twin {

class Segmenter : public nn::Module {
 public:
  Segmenter() {
    enc_ = register_module("enc",
                           std::make_shared<nn::Conv2d>(1, 8, 3, nn::Conv2dOptions{.padding = 1}));
    gn1_ = register_module("gn1", std::make_shared<nn::GroupNorm>(2, 8));
    down_ = register_module("down", std::make_shared<nn::Conv2d>(
                                        8, 16, 3, nn::Conv2dOptions{.stride = 2, .padding = 1}));
    gn2_ = register_module("gn2", std::make_shared<nn::GroupNorm>(4, 16));
    up_ = register_module("up", std::make_shared<nn::ConvTranspose2d>(
                                    16, 8, 2, nn::ConvTranspose2dOptions{.stride = 2}));
    dec_ = register_module("dec",
                           std::make_shared<nn::Conv2d>(16, 8, 3, nn::Conv2dOptions{.padding = 1}));
    gn3_ = register_module("gn3", std::make_shared<nn::GroupNorm>(2, 8));
    head_ = register_module("head", std::make_shared<nn::Conv2d>(8, 1, 1));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor e = relu(gn1_->forward(enc_->forward(x)));
    const Tensor d = relu(gn2_->forward(down_->forward(e)));
    const Tensor u = up_->forward(d);
    const Tensor h = relu(gn3_->forward(dec_->forward(cat({u, e}, 1))));
    return head_->forward(h);
  }

 private:
  std::shared_ptr<nn::Conv2d> enc_, down_, dec_, head_;
  std::shared_ptr<nn::GroupNorm> gn1_, gn2_, gn3_;
  std::shared_ptr<nn::ConvTranspose2d> up_;
};

class SequenceClassifier : public nn::Module {
 public:
  SequenceClassifier() {
    lstm_ = register_module("lstm",
                            std::make_shared<nn::LSTM>(4, 16, nn::RNNOptions{.batch_first = true}));
    head_ = register_module("head", std::make_shared<nn::Linear>(16, 3));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor out = lstm_->forward(x);  // [N, T, 16]
    return head_->forward(out.select(1, out.size(1) - 1));
  }

 private:
  std::shared_ptr<nn::LSTM> lstm_;
  std::shared_ptr<nn::Linear> head_;
};

}  // namespace kiln::twin
