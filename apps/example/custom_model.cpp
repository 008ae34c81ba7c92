// How a user defines a model, trains it and saves it: a small CNN on Fashion-MNIST, in f32 or with
// mixed precision (autocast, and loss scaling for fp16).
//   build/apps/kiln-example-custom-model [batches] [off|fp16|bf16]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

// A model is a Module that registers its layers; names become state_dict keys ("conv1.weight").
class SmallCnn : public nn::Module {
 public:
  SmallCnn() {
    conv1_ = register_module(
        "conv1", std::make_shared<nn::Conv2d>(1, 16, 3, nn::Conv2dOptions{.padding = {1, 1}}));
    bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(16));
    conv2_ = register_module(
        "conv2", std::make_shared<nn::Conv2d>(
                     16, 32, 3, nn::Conv2dOptions{.stride = {2, 2}, .padding = {1, 1}}));
    fc_ = register_module("fc", std::make_shared<nn::Linear>(32, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(bn1_->forward(conv1_->forward(x)));
    h = relu(conv2_->forward(h));
    return fc_->forward(adaptive_avg_pool2d(h, {1, 1}).flatten(1));
  }
  std::string name() const override { return "SmallCnn"; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::Linear> fc_;
};

int main(int argc, char** argv) {
  return apps::run_main("kiln-example-custom-model", [&] {
    const int64_t batches = argc > 1 ? std::atoll(argv[1]) : 200;
    const std::string amp = argc > 2 ? argv[2] : "off";
    KILN_CHECK(amp == "off" || amp == "fp16" || amp == "bf16", ValueError,
               "expected off, fp16 or bf16 as the second argument, got '{}'", amp);
    manual_seed(0);
    auto train = std::make_shared<data::MnistDataset>(
        data::MnistDataset::fashion("/usr/share/datasets/fashion-mnist", true));
    data::DataLoader loader(train,
                            data::compose({data::to_float(), data::normalize({0.286}, {0.353})}),
                            {.batch_size = 64, .shuffle = true, .num_workers = 1});
    auto model = std::make_shared<SmallCnn>();
    optim::Adam adam(model->parameters(), {.lr = 3e-3});
    // Mixed precision: the forward under autocast, and with fp16 a scaler for the loss.
    optim::GradScaler scaler({.enabled = amp == "fp16"});
    std::printf("%s\n", model->str().c_str());
    int64_t step = 0;
    for (data::Batch& batch : loader) {
      Tensor loss;
      {
        autocast mixed(amp == "bf16" ? DType::bf16 : DType::f16, amp != "off");
        loss = cross_entropy(model->forward(batch[0]), batch[1]);
      }
      adam.zero_grad();
      scaler.scale(loss).backward();
      scaler.step(adam);
      scaler.update();
      if (++step % 50 == 0)
        std::printf("step %lld loss %.4f\n", static_cast<long long>(step), loss.item<double>());
      if (step == batches) break;
    }
    nn::save_state_dict(*model, "small_cnn.safetensors");
    std::printf("saved small_cnn.safetensors\n");
    return 0;
  });
}
