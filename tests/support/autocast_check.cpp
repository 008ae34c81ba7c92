#include "autocast_check.h"

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "parity.h"

namespace kiln::testing {

namespace {

struct PolicyCase {
  std::string op;
  bool lower;  // runs in the scope's 16-bit type; otherwise in f32
  std::function<Tensor(const std::vector<Tensor>&)> run;
  std::vector<Shape> shapes;
};

std::vector<PolicyCase> policy_cases(Device device) {
  const Tensor labels = tensor<int64_t>({0, 2, 1, 2}).to(device);
  return {
      {"matmul", true, [](auto& t) { return matmul(t[0], t[1]); }, {{4, 8}, {8, 3}}},
      {"mm", true, [](auto& t) { return mm(t[0], t[1]); }, {{4, 8}, {8, 3}}},
      {"bmm", true, [](auto& t) { return bmm(t[0], t[1]); }, {{2, 4, 8}, {2, 8, 3}}},
      {"linear", true, [](auto& t) { return linear(t[0], t[1], t[2]); }, {{4, 8}, {3, 8}, {3}}},
      {"conv2d",
       true,
       [](auto& t) {
         return conv2d(t[0], t[1], t[2], {1, 1}, {1, 1});
       },
       {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}}},
      {"softmax", false, [](auto& t) { return softmax(t[0], 1); }, {{4, 3}}},
      {"log_softmax", false, [](auto& t) { return log_softmax(t[0], 1); }, {{4, 3}}},
      {"cross_entropy", false, [=](auto& t) { return cross_entropy(t[0], labels); }, {{4, 3}}},
      {"nll_loss", false, [=](auto& t) { return nll_loss(t[0], labels); }, {{4, 3}}},
      {"mse_loss", false, [](auto& t) { return mse_loss(t[0], t[1]); }, {{4, 3}, {4, 3}}},
      {"sum", false, [](auto& t) { return sum(t[0], {1}); }, {{4, 3}}},
      {"cumsum", false, [](auto& t) { return cumsum(t[0], 1); }, {{4, 3}}},
      {"norm", false, [](auto& t) { return norm(t[0]); }, {{4, 3}}},
      {"layer_norm",
       false,
       [](auto& t) { return layer_norm(t[0], {3}, t[1], t[2]); },
       {{4, 3}, {3}, {3}}},
      {"exp", false, [](auto& t) { return exp(t[0]); }, {{4, 3}}},
      {"log", false, [](auto& t) { return log(add(abs(t[0]), 1.0)); }, {{4, 3}}},
      {"pow", false, [](auto& t) { return pow(t[0], 2.0); }, {{4, 3}}},
      {"rsqrt", false, [](auto& t) { return rsqrt(add(abs(t[0]), 1.0)); }, {{4, 3}}},
      {"reciprocal", false, [](auto& t) { return reciprocal(add(abs(t[0]), 1.0)); }, {{4, 3}}},
  };
}

// Inputs of `dtype` on `device` from one seed, so the f32 and the cast runs see the same values
// (up to the 16-bit rounding the cast applies).
std::vector<Tensor> inputs(const std::vector<Shape>& shapes, DType dtype, Device device) {
  Generator gen(1234);
  std::vector<Tensor> out;
  for (const Shape& s : shapes)
    out.push_back(randn(s, DType::f32, Device::cpu(), &gen).to(dtype).to(device));
  return out;
}

}  // namespace

void check_autocast_policy(Device device, DType lower) {
  for (const PolicyCase& c : policy_cases(device)) {
    INFO(c.op << " under autocast(" << dtype_name(lower) << ") on " << device.str());
    CHECK(autocast_policy(c.op.c_str()) ==
          (c.lower ? CastPolicy::lower_precision : CastPolicy::fp32));
    // f32 inputs: the products go down to the 16-bit type, the rest stay in f32.
    const std::vector<Tensor> f32_inputs = inputs(c.shapes, DType::f32, device);
    const Tensor want = c.run(f32_inputs);
    Tensor got;
    {
      autocast amp(lower);
      got = c.run(f32_inputs);
    }
    CHECK(got.dtype() == (c.lower ? lower : DType::f32));
    check_close(got.to(DType::f32).cpu(), want.cpu(), composed_tolerance(lower));
    // 16-bit inputs: the f32 ops widen them; the products keep them.
    {
      autocast amp(lower);
      const Tensor from_half = c.run(inputs(c.shapes, lower, device));
      CHECK(from_half.dtype() == (c.lower ? lower : DType::f32));
    }
  }

  const Tensor h = randn({4, 3}).to(lower).to(device), f = randn({4, 3}).to(device);
  autocast amp(lower);
  // Ops outside the table run in their inputs' dtype; mixed inputs promote.
  CHECK(relu(h).dtype() == lower);
  CHECK(mean(h).dtype() == lower);
  CHECK(add(h, f).dtype() == DType::f32);
  CHECK(mul(h, h).dtype() == lower);
  CHECK(cat({h, f}, 0).dtype() == DType::f32);
  CHECK(max_pool2d(randn({1, 2, 4, 4}).to(lower).to(device), {2, 2}).dtype() == lower);
  // Batch norm takes 16-bit activations with f32 weights and running statistics.
  const Tensor running_mean = zeros({3}, DType::f32, device),
               running_var = ones({3}, DType::f32, device);
  const Tensor bn = batch_norm(randn({2, 3, 4, 4}).to(lower).to(device), running_mean, running_var,
                               ones({3}, DType::f32, device), zeros({3}, DType::f32, device), true);
  CHECK(bn.dtype() == lower);
  CHECK(running_mean.dtype() == DType::f32);
  // f64 is left alone, as in PyTorch: the policy casts only f32 and the 16-bit types.
  const Tensor d = randn({4, 4}, DType::f64).to(device);
  CHECK(matmul(d, d).dtype() == DType::f64);
  CHECK(softmax(d, 0).dtype() == DType::f64);
}

void check_autocast_training_step(Device device, DType lower) {
  auto build = [&] {
    manual_seed(7);
    auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(3, 8, Pair{3, 3},
                                     nn::Conv2dOptions{.padding = {1, 1}, .bias = false}),
        std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::AdaptiveAvgPool2d>(Pair{1, 1}), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(8, 5)});
    model->to(device);
    return model;
  };
  Generator gen(99);
  const Tensor images = randn({6, 3, 8, 8}, DType::f32, Device::cpu(), &gen).to(device);
  const Tensor labels = tensor<int64_t>({0, 1, 2, 3, 4, 0}).to(device);

  auto reference = build();
  cross_entropy(reference->forward(images), labels).backward();

  auto model = build();
  Tensor logits, loss;
  {
    autocast amp(lower);
    logits = model->forward(images);
    loss = cross_entropy(logits, labels);
  }
  CHECK(logits.dtype() == lower);
  CHECK(loss.dtype() == DType::f32);
  loss.backward();
  const auto want = reference->named_parameters(), got = model->named_parameters();
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(got[i].first);
    const Tensor g = got[i].second.grad();
    REQUIRE(g.defined());
    CHECK(g.dtype() == DType::f32);
    CHECK(got[i].second.dtype() == DType::f32);
    // The 16-bit forward rounds activations and weights; the gradient keeps a few of its ulps.
    check_close(g.cpu(), want[i].second.grad().cpu(),
                relative_to_largest(8 * tolerance(lower).rtol, want[i].second.grad().cpu()));
  }
}

}  // namespace kiln::testing
