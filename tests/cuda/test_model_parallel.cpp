// Model parallel in one process: a model split in two, its first half on cuda:0 and its second on
// cuda:1, with to() between the halves, trained a few steps (forward across the devices, backward
// through the copy, one optimizer over parameters on both) and held against the same model
// trained on cuda:0 alone; then the same as an nn::Pipeline of micro-batches. Needs a second GPU
// (the simulator has two by default); with one each case says so and returns.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/backends.h"
#include "kiln/core/cuda.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {

// cuDNN's deterministic mode for a scope: the comparisons below are of the same kernels on the
// same values, which holds for cuDNN's backward passes only when asked for (the simulator's
// stand-in varies their sums otherwise, docs/simulator.md "Strictness", as cuDNN may).
struct DeterministicCudnn {
  bool before = backends::cudnn_deterministic();
  DeterministicCudnn() { backends::set_cudnn_deterministic(true); }
  ~DeterministicCudnn() { backends::set_cudnn_deterministic(before); }
  DeterministicCudnn(const DeterministicCudnn&) = delete;
  DeterministicCudnn& operator=(const DeterministicCudnn&) = delete;
};

// Convolution, batch norm and ReLU, then a linear classifier: each half on its own device.
struct SplitNet : nn::Module {
  std::shared_ptr<nn::Sequential> features, classifier;
  Device first, second;

  SplitNet(Device first_device, Device second_device) : first(first_device), second(second_device) {
    manual_seed(11);
    features = register_module(
        "features", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                        std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::BatchNorm2d>(4),
                        std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>()}));
    classifier = register_module(
        "classifier", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                          std::make_shared<nn::Linear>(4 * 6 * 6, 10)}));
    features->to(first);
    classifier->to(second);
  }
  Tensor forward(const Tensor& x) override {
    return classifier->forward(features->forward(x.to(first)).to(second));
  }
  std::string name() const override { return "SplitNet"; }
};

std::vector<Tensor> train_steps(SplitNet& net) {
  optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int step = 0; step < 4; ++step) {
    Generator gen(300 + static_cast<uint64_t>(step));
    const Tensor x = randn({16, 1, 8, 8}, DType::f32, Device::cpu(), &gen);
    const Tensor y = randint(0, 10, {16}, DType::i64, Device::cpu(), &gen);
    opt.zero_grad();
    cross_entropy(net.forward(x), y.to(net.second)).backward();
    opt.step();
  }
  std::vector<Tensor> out;
  for (const Tensor& p : net.parameters()) out.push_back(p.detach().cpu());
  for (const auto& [name, b] : net.named_buffers()) out.push_back(b.cpu().to(DType::f64));
  return out;
}

}  // namespace

TEST_CASE("model parallel: a model split over cuda:0 and cuda:1 trains as on one GPU") {
  if (cuda::device_count() < 2) {
    WARN("one GPU visible: model parallel across two GPUs is not checked");
    return;
  }
  cuda::set_device(0);
  SplitNet split(Device::cuda(0), Device::cuda(1));
  SplitNet single(Device::cuda(0), Device::cuda(0));
  const std::vector<Tensor> got = train_steps(split), want = train_steps(single);
  // Each half's parameters and gradients stayed on their device, and the current device is the
  // caller's.
  for (const Tensor& p : split.features->parameters()) {
    CHECK(p.device() == Device::cuda(0));
    CHECK(p.grad().device() == Device::cuda(0));
  }
  for (const Tensor& p : split.classifier->parameters()) {
    CHECK(p.device() == Device::cuda(1));
    CHECK(p.grad().device() == Device::cuda(1));
  }
  CHECK(cuda::current_device() == 0);
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("parameter or buffer " << k);
    // The same kernels on the same values: only the devices differ.
    CHECK(allclose(got[k], want[k], 1e-6, 1e-6));
  }
}

TEST_CASE("pipeline: stages on cuda:0 and cuda:1 with micro-batches train as on one GPU") {
  const DeterministicCudnn deterministic;
  if (cuda::device_count() < 2) {
    WARN("one GPU visible: a pipeline across two GPUs is not checked");
    return;
  }
  cuda::set_device(0);
  // The SplitNet's halves as a Pipeline's two stages (no batch norm: with it, micro-batches
  // normalise by their own statistics, which one batch does not).
  auto stages = [] {
    manual_seed(12);
    auto features = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Flatten>()});
    auto classifier = std::make_shared<nn::Sequential>(
        std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(4 * 6 * 6, 10)});
    return std::vector<std::shared_ptr<nn::Module>>{features, classifier};
  };
  nn::Pipeline split(stages(), {Device::cuda(0), Device::cuda(1)},
                     {.chunks = 4, .checkpoint = nn::PipelineCheckpoint::except_last});
  nn::Pipeline one_micro_batch(stages(), {Device::cuda(0), Device::cuda(1)});
  nn::Pipeline single(stages(), {Device::cuda(0), Device::cuda(0)});
  auto train = [](nn::Pipeline& pipe) {
    optim::SGD opt(pipe.parameters(), {.lr = 0.05, .momentum = 0.9});
    for (int step = 0; step < 3; ++step) {
      Generator gen(500 + static_cast<uint64_t>(step));
      const Tensor x = randn({16, 1, 8, 8}, DType::f32, Device::cpu(), &gen).pin_memory();
      const Tensor y = randint(0, 10, {16}, DType::i64, Device::cpu(), &gen);
      opt.zero_grad();
      cross_entropy(pipe.forward(x), y.to(pipe.output_device())).backward();
      opt.step();
    }
    std::vector<Tensor> out;
    for (const Tensor& p : pipe.parameters()) out.push_back(p.detach().cpu());
    return out;
  };
  const std::vector<Tensor> got = train(split), got_one = train(one_micro_batch),
                            want = train(single);
  for (const Tensor& p : split[1]->parameters()) {
    CHECK(p.device() == Device::cuda(1));
    CHECK(p.grad().device() == Device::cuda(1));
  }
  CHECK(cuda::current_device() == 0);
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("parameter " << k);
    // One micro-batch: the same kernels on the same values, only the devices differ.
    CHECK(equal(got_one[k], want[k]));
    // Four: the gradients are sums over micro-batches.
    CHECK(allclose(got[k], want[k], 1e-5, 1e-6));
  }
}
