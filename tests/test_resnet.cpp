// ResNets: torchvision's parameter names and counts, forward shapes and backward on tiny inputs,
// zero_init_residual, make_resnet, BatchNorm's eval mode making samples independent, and
// checkpointing ResNet-50's blocks (checkpoint_sequential).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/nn/resnet.h"
#include "parity.h"

using namespace kiln;
using testing::check_close;
using testing::random_f64;
using testing::tolerance;

namespace {

Tensor random_f32(const Shape& shape, uint64_t seed) {
  return random_f64(shape, seed).to(DType::f32);
}

nn::ResNetOptions options(int64_t num_classes, int64_t in_channels, bool small_input,
                          bool zero_init = false) {
  nn::ResNetOptions o;
  o.num_classes = num_classes;
  o.in_channels = in_channels;
  o.small_input = small_input;
  o.zero_init_residual = zero_init;
  return o;
}

// The ImageNet models are built once and shared by the tests that only read them: most of their
// construction time is drawing tens of millions of random weights.
nn::ResNet& shared_model(const std::string& name) {
  static std::map<std::string, std::shared_ptr<nn::ResNet>> models;
  auto& model = models[name];
  if (!model) model = nn::make_resnet(name, {});
  return *model;
}

std::shared_ptr<nn::Module> module_named(nn::Module& root, const std::string& name) {
  for (auto& [n, m] : root.named_modules())
    if (n == name) return m;
  return nullptr;
}

Tensor tensor_named(const nn::Module& root, const std::string& name) {
  nn::StateDict state = root.state_dict();
  auto it = state.find(name);
  return it == state.end() ? Tensor() : it->second;
}

}  // namespace

TEST_CASE("resnet: resnet18's parameter and buffer names are torchvision's") {
  nn::ResNet& model = shared_model("resnet18");
  nn::StateDict state = model.state_dict();
  for (const char* name :
       {"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
        "bn1.num_batches_tracked", "layer1.0.conv1.weight", "layer1.0.bn2.running_var",
        "layer1.1.conv2.weight", "layer2.0.downsample.0.weight", "layer2.0.downsample.1.bias",
        "layer2.0.downsample.1.running_mean", "layer3.1.bn1.weight", "layer4.1.conv2.weight",
        "fc.weight", "fc.bias"}) {
    INFO(name);
    CHECK(state.count(name) == 1);
  }
  // No bias on convolutions, no downsample where the shape does not change, no fifth stage.
  for (const char* name :
       {"conv1.bias", "layer1.0.downsample.0.weight", "layer2.1.downsample.0.weight",
        "layer5.0.conv1.weight", "maxpool.weight"}) {
    INFO(name);
    CHECK(state.count(name) == 0);
  }
  // torchvision's resnet18 state_dict has 62 parameters and 60 buffers (20 BatchNorms x 3).
  CHECK(model.named_parameters().size() == 62);
  CHECK(model.named_buffers().size() == 60);
  CHECK(model.named_parameters().front().first == "conv1.weight");
  CHECK(model.named_parameters().back().first == "fc.bias");
  CHECK(state.at("conv1.weight").shape() == Shape{64, 3, 7, 7});
  CHECK(state.at("layer2.0.downsample.0.weight").shape() == Shape{128, 64, 1, 1});
  CHECK(state.at("fc.weight").shape() == Shape{1000, 512});
}

TEST_CASE("resnet: resnet50's bottleneck names are torchvision's") {
  nn::ResNet& model = shared_model("resnet50");
  nn::StateDict state = model.state_dict();
  for (const char* name :
       {"layer1.0.conv3.weight", "layer1.0.bn3.running_var", "layer1.0.downsample.0.weight",
        "layer3.5.bn3.bias", "layer4.2.conv3.weight"}) {
    INFO(name);
    CHECK(state.count(name) == 1);
  }
  CHECK(state.count("layer1.1.downsample.0.weight") == 0);
  CHECK(state.at("layer1.0.conv1.weight").shape() == Shape{64, 64, 1, 1});
  CHECK(state.at("layer1.0.conv3.weight").shape() == Shape{256, 64, 1, 1});
  CHECK(state.at("layer2.0.conv2.weight").shape() == Shape{128, 128, 3, 3});
  CHECK(state.at("fc.weight").shape() == Shape{1000, 2048});
  // ResNet v1.5: the stride sits on the 3x3 convolution, not the first 1x1.
  auto conv1 = std::dynamic_pointer_cast<nn::Conv2d>(module_named(model, "layer2.0.conv1"));
  auto conv2 = std::dynamic_pointer_cast<nn::Conv2d>(module_named(model, "layer2.0.conv2"));
  REQUIRE(conv1);
  REQUIRE(conv2);
  CHECK_THAT(conv1->extra_repr(), Catch::Contains("stride=(1, 1)"));
  CHECK_THAT(conv2->extra_repr(), Catch::Contains("stride=(2, 2)"));
}

// One test case per model, so ctest runs the constructions side by side.
TEST_CASE("resnet: resnet18's parameter count equals torchvision's") {
  CHECK(shared_model("resnet18").parameter_count() == 11689512);
}

TEST_CASE("resnet: resnet34's parameter count equals torchvision's") {
  CHECK(nn::resnet34()->parameter_count() == 21797672);
}

TEST_CASE("resnet: resnet50's parameter count equals torchvision's") {
  CHECK(shared_model("resnet50").parameter_count() == 25557032);
}

TEST_CASE("resnet: resnet101's parameter count equals torchvision's") {
  CHECK(nn::resnet101()->parameter_count() == 44549160);
}

TEST_CASE("resnet: resnet20's parameter count, with 1x1-conv shortcuts") {
  // conv1 3->16 3x3: 432; bn1: 32.
  // Stage 1, 3 blocks of two 16->16 3x3 convs (2304 each) and two BNs (32 each): 3 * 4672 = 14016.
  // Stage 2, first block: 16->32 (4608) + 32->32 (9216) + BNs (128) + shortcut 1x1 16->32 (512) and
  // its BN (64) = 14528; two more blocks of 2 * 9216 + 128 = 18560: 51648.
  // Stage 3, first block: 32->64 (18432) + 64->64 (36864) + BNs (256) + shortcut 2048 + BN 128 =
  // 57728; two more of 2 * 36864 + 256 = 73984: 205696. fc 64->10: 650. Total 272474 (option A's
  // 269722 plus the two shortcuts' 2752).
  CHECK(nn::resnet20()->parameter_count() == 272474);
  // One input channel: conv1 holds 144 instead of 432.
  CHECK(nn::resnet20(options(10, 1, true))->parameter_count() == 272186);
  CHECK(nn::resnet20()->named_parameters().size() == 3 + 9 * 6 + 2 * 3 + 2);
}

TEST_CASE("resnet: make_resnet builds each model by name and lists the names when unknown") {
  CHECK(nn::make_resnet("resnet20", options(10, 3, true))->parameter_count() == 272474);
  CHECK(nn::make_resnet("resnet32", options(10, 3, true))->named_parameters().size() ==
        nn::resnet32()->named_parameters().size());
  CHECK(nn::make_resnet("resnet56", options(100, 3, true))->state_dict().at("fc.weight").shape() ==
        Shape{100, 64});
  CHECK_THROWS_AS(nn::make_resnet("resnet19", {}), ValueError);
  CHECK_THROWS_WITH(nn::make_resnet("resnet19", {}),
                    Catch::Contains("resnet19") && Catch::Contains("resnet18") &&
                        Catch::Contains("resnet34") && Catch::Contains("resnet50") &&
                        Catch::Contains("resnet101") && Catch::Contains("resnet20") &&
                        Catch::Contains("resnet32") && Catch::Contains("resnet56"));
}

TEST_CASE("resnet: the constructor rejects bad configurations") {
  // The extra parentheses keep the braces' commas from splitting the macro's arguments.
  CHECK_THROWS_AS((nn::ResNet("wide", {1}, {8}, {})), ValueError);
  CHECK_THROWS_WITH((nn::ResNet("wide", {1}, {8}, {})), Catch::Contains("wide"));
  CHECK_THROWS_AS((nn::ResNet("basic", {1, 1}, {8}, {})), ValueError);
  CHECK_THROWS_AS((nn::ResNet("basic", {}, {}, {})), ValueError);
  CHECK_THROWS_AS((nn::ResNet("basic", {1}, {8}, options(0, 3, true))), ValueError);
  CHECK_THROWS_AS((nn::ResNet("basic", {1}, {0}, {})), ValueError);
}

TEST_CASE("resnet: resnet18 on small 32x32 inputs gives [N, num_classes]") {
  auto model = nn::resnet18(options(10, 3, true));
  CHECK(module_named(*model, "maxpool") == nullptr);
  CHECK(tensor_named(*model, "conv1.weight").shape() == Shape{64, 3, 3, 3});
  Tensor y = model->forward(random_f32({2, 3, 32, 32}, 1));
  CHECK(y.shape() == Shape{2, 10});
  CHECK_THROWS_AS(model->forward(random_f32({3, 32, 32}, 2)), ShapeError);
  CHECK_THROWS_WITH(model->forward(random_f32({3, 32, 32}, 2)), Catch::Contains("ResNet"));
}

TEST_CASE("resnet: the ImageNet stem (7x7 stride 2, max-pool) on a tiny input") {
  nn::ResNet model("basic", {1, 1}, {4, 8}, options(5, 3, false));
  REQUIRE(module_named(model, "maxpool") != nullptr);
  // 32 -> 16 (stem) -> 8 (max-pool) -> 8 (layer1) -> 4 (layer2).
  Tensor y = model.forward(random_f32({2, 3, 32, 32}, 3));
  CHECK(y.shape() == Shape{2, 5});
}

TEST_CASE("resnet: resnet20 on one-channel 28x28 inputs runs forward and backward") {
  auto model = nn::resnet20(options(10, 1, true));
  Tensor x = random_f32({2, 1, 28, 28}, 4);
  x.requires_grad_();
  Tensor y = model->forward(x);
  CHECK(y.shape() == Shape{2, 10});
  cross_entropy(y, tensor(std::vector<int64_t>{3, 7})).backward();
  for (auto& [n, p] : model->named_parameters()) {
    INFO(n);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().shape() == p.shape());
    std::vector<double> g = p.grad().tolist();
    CHECK(std::all_of(g.begin(), g.end(), [](double v) { return std::isfinite(v); }));
    CHECK(std::any_of(g.begin(), g.end(), [](double v) { return v != 0.0; }));
  }
  CHECK(x.grad().defined());
  for (auto& [n, b] : model->named_buffers())
    if (n.find("num_batches_tracked") != std::string::npos) CHECK(b.item<int64_t>() == 1);
}

TEST_CASE("resnet: a bottleneck ResNet of tiny widths runs forward and backward") {
  nn::ResNet model("bottleneck", {2, 1}, {4, 8}, options(3, 2, true));
  nn::StateDict state = model.state_dict();
  // 4 != 4 * 4 channels: the first block needs a shortcut even at stride 1.
  CHECK(state.count("layer1.0.downsample.0.weight") == 1);
  CHECK(state.count("layer1.1.downsample.0.weight") == 0);
  CHECK(state.at("layer2.0.downsample.0.weight").shape() == Shape{32, 16, 1, 1});
  CHECK(state.at("fc.weight").shape() == Shape{3, 32});
  Tensor y = model.forward(random_f32({2, 2, 8, 8}, 5));
  CHECK(y.shape() == Shape{2, 3});
  y.sum().backward();
  for (auto& [n, p] : model.named_parameters()) {
    INFO(n);
    CHECK(p.grad().defined());
  }
}

TEST_CASE("resnet: zero_init_residual zeroes each block's last BatchNorm weight") {
  auto basic = nn::resnet20(options(10, 3, true, true));
  int zeroed = 0;
  for (auto& [n, p] : basic->named_parameters()) {
    // BatchNorm biases start at zero anyway.
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0) continue;
    std::vector<double> v = p.tolist();
    bool all_zero = std::all_of(v.begin(), v.end(), [](double x) { return x == 0.0; });
    const std::string suffix = "bn2.weight";
    bool last_bn_weight = n.find("layer") == 0 && n.size() > suffix.size() &&
                          n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
    INFO(n);
    CHECK(all_zero == last_bn_weight);
    zeroed += last_bn_weight;
  }
  CHECK(zeroed == 9);
  CHECK(tensor_named(*basic, "layer1.0.bn1.weight").tolist() == std::vector<double>(16, 1.0));

  nn::ResNet bottleneck("bottleneck", {2, 1}, {4, 8}, options(3, 3, true, true));
  std::vector<double> bn3 = tensor_named(bottleneck, "layer1.1.bn3.weight").tolist();
  CHECK(bn3 == std::vector<double>(16, 0.0));
  CHECK(tensor_named(bottleneck, "layer2.0.bn3.weight").tolist() == std::vector<double>(32, 0.0));
  CHECK(tensor_named(bottleneck, "layer1.0.bn2.weight").tolist() == std::vector<double>(4, 1.0));
  // The shortcut's BatchNorm keeps its weight of one.
  CHECK(tensor_named(bottleneck, "layer1.0.downsample.1.weight").tolist() ==
        std::vector<double>(16, 1.0));

  // Without the option nothing is zero.
  auto plain = nn::resnet20();
  CHECK(tensor_named(*plain, "layer1.0.bn2.weight").tolist() == std::vector<double>(16, 1.0));
}

TEST_CASE("resnet: torchvision's initialisation of convolutions, BatchNorms and fc") {
  auto model = nn::resnet20();
  // He normal with fan_out: std sqrt(2 / (64 * 9)) for a 64-channel 3x3 convolution.
  std::vector<double> w = tensor_named(*model, "layer3.2.conv1.weight").tolist();
  double sq = 0;
  for (double v : w) sq += v * v;
  CHECK(std::sqrt(sq / static_cast<double>(w.size())) ==
        Approx(std::sqrt(2.0 / 576.0)).epsilon(0.03));
  CHECK(tensor_named(*model, "bn1.bias").tolist() == std::vector<double>(16, 0.0));
  std::vector<double> fc = tensor_named(*model, "fc.weight").tolist();
  CHECK(std::all_of(fc.begin(), fc.end(), [](double v) { return std::abs(v) <= 1.0 / 8.0; }));
}

TEST_CASE("resnet: in eval mode each sample's output does not depend on the rest of the batch") {
  auto model = nn::resnet20(options(10, 3, true));
  Tensor x = random_f32({3, 3, 16, 16}, 6);
  // A training pass first, so the running statistics are not the trivial 0 and 1.
  model->forward(x);
  model->eval();
  Tensor batch_out = model->forward(x);
  Tensor alone = model->forward(x.narrow(0, 1, 1));
  check_close(batch_out.narrow(0, 1, 1), alone, tolerance(DType::f32));
  // In training mode the batch statistics couple the samples.
  model->train();
  std::vector<double> coupled = model->forward(x).narrow(0, 1, 1).tolist();
  std::vector<double> single = model->forward(x.narrow(0, 1, 2)).narrow(0, 0, 1).tolist();
  CHECK(coupled != single);
}

TEST_CASE("resnet: str() names the blocks and counts the parameters") {
  std::string s = nn::resnet20()->str();
  CHECK_THAT(s, Catch::StartsWith("ResNet(\n  (conv1): Conv2d(3, 16, kernel_size=(3, 3)"));
  CHECK_THAT(s, Catch::Contains(
                    "(layer2): Sequential(\n    (0): BasicBlock(\n      (conv1): Conv2d(16, 32"));
  CHECK_THAT(s, Catch::Contains("(downsample): Sequential("));
  CHECK_THAT(s, Catch::EndsWith("272474 parameters (272474 trainable)"));
}

namespace {

// ResNet's forward written out, each stage (layer1 ... layer4) through checkpoint_sequential: the
// way a user checkpoints a model that is not one Sequential.
Tensor forward_checkpointed(nn::ResNet& model, const Tensor& x) {
  auto bn1 = std::dynamic_pointer_cast<nn::BatchNorm2d>(module_named(model, "bn1"));
  Tensor h = bn1->forward_relu(module_named(model, "conv1")->forward(x));
  h = module_named(model, "maxpool")->forward(h);
  for (const char* name : {"layer1", "layer2", "layer3", "layer4"}) {
    auto stage = std::dynamic_pointer_cast<nn::Sequential>(module_named(model, name));
    // Every block but the stage's last keeps only its input.
    h = nn::checkpoint_sequential(*stage, static_cast<int64_t>(stage->size()), h);
  }
  h = module_named(model, "avgpool")->forward(h).flatten(1);
  return module_named(model, "fc")->forward(h);
}

// The most bytes held above the starting point during forward and backward of sum(out^2), with
// every gradient already allocated (as from the training step before), so that only activations
// and the backward's temporaries count.
template <typename Forward>
int64_t step_peak_bytes(nn::ResNet& model, const Tensor& x, Forward forward) {
  for (const Tensor& p : model.parameters()) p.grad().zero_();
  const int64_t start = memory_stats().current_bytes;
  reset_peak_memory_stats();
  Tensor out = forward(x);
  mul(out, out).sum().backward();
  return memory_stats().peak_bytes - start;
}

}  // namespace

TEST_CASE("resnet: checkpointing resnet50's blocks lowers the step's peak memory, same gradients",
          "[may_skip]") {
#if defined(__SANITIZE_ADDRESS__)
  // Building ResNet-50 and three forwards and two backwards take about a minute of CPU there; the
  // checkpoint cases of test_autograd run checkpointing under the sanitizers.
  WARN("SKIPPED: too slow under the sanitizers; the release build runs it");
  return;
#endif
  manual_seed(1);
  auto model = nn::resnet50(options(10, 3, false));
  for (Tensor& p : model->parameters()) p.set_grad(zeros_like(p));
  // 64x64 on the ImageNet stem: stages at 16, 8, 4 and 2 pixels, cheap enough for the sanitizer.
  const Tensor x = random_f32({2, 3, 128, 128}, 9);
  const int64_t plain =
      step_peak_bytes(*model, x, [&](const Tensor& in) { return model->forward(in); });
  std::vector<Tensor> want;
  for (const Tensor& p : model->parameters()) want.push_back(p.grad().clone());
  const int64_t checkpointed = step_peak_bytes(
      *model, x, [&](const Tensor& in) { return forward_checkpointed(*model, in); });
  // 63.0 MB and 35.5 MB when this was written (docs/results-history.md, "Activation checkpointing's
  // memory").
  CAPTURE(plain, checkpointed);
  CHECK(checkpointed * 10 < plain * 7);
  const std::vector<Tensor> params = model->parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    INFO("parameter " << k);
    CHECK(equal(params[k].grad(), want[k]));
  }
}

TEST_CASE("resnet: checkpoint_sequential takes 1 to size() segments") {
  auto seq = nn::Sequential({std::make_shared<nn::ReLU>(), std::make_shared<nn::ReLU>()});
  const Tensor x = random_f32({3}, 2);
  CHECK(equal(nn::checkpoint_sequential(seq, 1, x), relu(x)));
  CHECK(equal(nn::checkpoint_sequential(seq, 2, x), relu(x)));
  CHECK_THROWS_WITH(nn::checkpoint_sequential(seq, 3, x),
                    Catch::Contains("segments must be from 1 to the number of modules (2), got 3"));
  CHECK_THROWS_AS(nn::checkpoint_sequential(seq, 0, x), ValueError);
}
