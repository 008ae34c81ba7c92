// Module hooks and tree edits, as PyTorch's: forward pre-hooks and hooks (seeing, replacing,
// removed by their handle, run when a module is called, also inside Sequential and ResNet),
// apply() visiting children before parents, replace_module keeping the state_dict's order.
#include <catch2/catch.hpp>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;
using Catch::Contains;

TEST_CASE("module hooks: pre-hooks and hooks see, replace, and are removed") {
  manual_seed(0);
  nn::Linear layer(3, 2);
  Tensor x = randn({4, 3});
  const Tensor plain = layer(x);
  std::vector<std::string> order;
  nn::HookHandle doubling = layer.register_forward_pre_hook([&](nn::Module& m, const Tensor& in) {
    order.push_back("pre " + m.name());
    return in * 2.0;
  });
  Tensor seen_input;
  nn::HookHandle seeing =
      layer.register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor&) {
        order.push_back("post");
        seen_input = in;
        return Tensor();  // keeps the output
      });
  nn::HookHandle negating = layer.register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor& out) { return -out; });
  Tensor hooked = layer(x);
  CHECK(order == std::vector<std::string>{"pre Linear", "post"});
  CHECK(allclose(seen_input, x * 2.0));  // the pre-hook's replacement
  CHECK(allclose(hooked, -layer.forward(x * 2.0)));
  CHECK(allclose(layer.forward(x), plain));  // forward() itself runs no hook
  doubling.remove();
  negating.remove();
  negating.remove();  // a second remove does nothing
  CHECK(allclose(layer(x), plain));
  seeing.remove();
  order.clear();
  layer(x);
  CHECK(order.empty());
}

TEST_CASE("module hooks: a forward hook on a ResNet stage collects its features") {
  manual_seed(0);
  auto model = nn::resnet20();
  model->eval();
  std::vector<Shape> seen;
  std::shared_ptr<nn::Module> stage;
  for (auto& [name, m] : model->named_modules())
    if (name == "layer2") stage = m;
  REQUIRE(stage != nullptr);
  nn::HookHandle handle =
      stage->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor& out) {
        seen.push_back(out.shape());
        return Tensor();
      });
  NoGradGuard no_grad;
  (*model)(randn({2, 3, 32, 32}));
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == Shape{2, 32, 16, 16});
  handle.remove();
}

TEST_CASE("apply visits every module, children before their parent") {
  nn::Sequential net;
  net.push_back(std::make_shared<nn::Linear>(4, 3));
  auto inner = std::make_shared<nn::Sequential>();
  inner->push_back(std::make_shared<nn::ReLU>());
  inner->push_back(std::make_shared<nn::Linear>(3, 2));
  net.push_back(inner);
  std::vector<std::string> visited;
  net.apply([&](nn::Module& m) { visited.push_back(m.name()); });
  CHECK(visited ==
        std::vector<std::string>{"Linear", "ReLU", "Linear", "Sequential", "Sequential"});
  // The usual use: an initialisation of every Linear.
  net.apply([](nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
      NoGradGuard no_grad;
      linear->weight.fill_(0.5);
    }
  });
  for (const auto& [name, t] : net.named_parameters())
    if (name.find("weight") != std::string::npos) CHECK(t.min().item() == 0.5);
}

TEST_CASE("replace_module swaps a child in place, in containers too") {
  nn::Sequential net;
  net.push_back(std::make_shared<nn::Linear>(4, 3));
  net.push_back(std::make_shared<nn::ReLU>());
  net.push_back(std::make_shared<nn::Linear>(3, 2));
  auto gelu = net.replace_module("1", std::make_shared<nn::GELU>());
  CHECK(net[1] == gelu);
  CHECK(net.named_children()[1].second == gelu);
  Tensor x = tensor({{-1.f, 2.f, 0.5f, -0.25f}});
  auto first = std::dynamic_pointer_cast<nn::Linear>(net[0]);
  auto last = std::dynamic_pointer_cast<nn::Linear>(net[2]);
  CHECK(allclose(net(x), (*last)(kiln::gelu((*first)(x)))));
  // A replaced Linear's parameters leave the state dict, the new one's take their keys.
  auto wider = net.replace_module("2", std::make_shared<nn::Linear>(3, 5));
  CHECK(net.state_dict().at("2.weight").shape() == Shape{5, 3});
  CHECK_THROWS_WITH(net.replace_module("7", std::make_shared<nn::ReLU>()),
                    Contains("no submodule named '7'") && Contains("0, 1, 2"));
}

TEST_CASE("module hooks: a forward of several tensors, module({a, b}), with its hooks") {
  nn::MSELoss mse;
  Tensor input = tensor({1.0, 2.0, 4.0}), target = tensor({1.0, 0.0, 0.0});
  CHECK(mse({input, target}).item() == Approx(20.0 / 3));
  int one_tensor_calls = 0;
  std::vector<size_t> seen_counts;
  mse.register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) {
    ++one_tensor_calls;
    return Tensor();
  });
  nn::HookHandle scaling =
      mse.register_forward_pre_hook([&](nn::Module&, const std::vector<Tensor>& in) {
        seen_counts.push_back(in.size());
        return std::vector<Tensor>{in[0] * 2.0, in[1]};  // doubles the input
      });
  mse.register_forward_hook(
      [&](nn::Module&, const std::vector<Tensor>&, const Tensor& out) { return out + 1.0; });
  CHECK(mse({input, target}).item() == Approx((1.0 + 16.0 + 64.0) / 3 + 1.0));
  CHECK(seen_counts == std::vector<size_t>{2});
  CHECK(one_tensor_calls == 0);  // a one-tensor hook runs on one-tensor calls only
  CHECK(mse(input, target).item() == Approx(20.0 / 3));  // the direct call runs no hook
  scaling.remove();

  // MultiheadAttention({q, k, v}) is its forward's output; a one-tensor module refuses two.
  manual_seed(1);
  nn::MultiheadAttention mha(8, 2, {.batch_first = true});
  Tensor q = randn({2, 3, 8}), kv = randn({2, 5, 8});
  CHECK(allclose(mha({q, kv, kv}), mha.forward(q, kv, kv).output));
  nn::Linear linear(8, 4);
  CHECK(allclose(linear(std::vector<Tensor>{q}), linear(q)));
  CHECK_THROWS_WITH(linear({q, q}), Contains("Linear: this module's forward takes one tensor"));
  CHECK_THROWS_WITH(mse(std::vector<Tensor>{input}), Contains("MSELoss: expected 2 input tensors"));
}
