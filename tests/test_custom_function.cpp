// autograd::Function: a custom forward and backward with several inputs and outputs, saved tensors,
// unused outputs, integer outputs, double backward, and the errors a wrong backward gets.
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using Catch::Contains;

namespace {

// (sin(x) * y, cos(x)) and the argmax of x: two differentiable outputs and an integer one.
struct SinCos : autograd::Function {
  int backward_calls = 0;
  std::string name() const override { return "SinCos"; }
  std::vector<Tensor> forward(autograd::FunctionContext& ctx,
                              const std::vector<Tensor>& in) override {
    ctx.save_for_backward({in[0], in[1]});
    return {sin(in[0]) * in[1], cos(in[0]), argmax(in[0], 0)};
  }
  std::vector<Tensor> backward(autograd::FunctionContext& ctx,
                               const std::vector<Tensor>& grads) override {
    ++backward_calls;
    CHECK_FALSE(grads[2].defined());  // the integer output has no gradient
    const std::vector<Tensor> saved = ctx.saved_tensors();
    const Tensor& x = saved[0];
    const Tensor& y = saved[1];
    Tensor gx = grads[0] * y * cos(x) - grads[1] * sin(x);
    Tensor gy = ctx.needs_input_grad(1) ? grads[0] * sin(x) : Tensor();
    return {gx, gy};
  }
};

// Returns the wrong number of gradients, or a gradient of the wrong shape.
struct Broken : autograd::Function {
  bool wrong_shape = false;
  std::string name() const override { return "Broken"; }
  std::vector<Tensor> forward(autograd::FunctionContext&, const std::vector<Tensor>& in) override {
    return {in[0] * 2.0};
  }
  std::vector<Tensor> backward(autograd::FunctionContext&,
                               const std::vector<Tensor>& grads) override {
    if (wrong_shape) return {grads[0].sum()};
    return {grads[0], grads[0]};
  }
};

}  // namespace

TEST_CASE("autograd::Function: several outputs, one backward call, gradients as composed ops") {
  Tensor x = tensor({0.3, -1.2, 2.0}).requires_grad_();
  Tensor y = tensor({1.5, 0.5, -0.7}).requires_grad_();
  auto fn = std::make_shared<SinCos>();
  std::vector<Tensor> out = autograd::apply(fn, {x, y});
  REQUIRE(out.size() == 3);
  CHECK(out[0].grad_fn()->name() == "SinCosOutput");
  CHECK_FALSE(out[2].requires_grad());
  CHECK(out[2].item<int64_t>() == 2);
  (out[0] * 2.0 + out[1] * 3.0).sum().backward();
  CHECK(fn->backward_calls == 1);
  Tensor xr = tensor({0.3, -1.2, 2.0}).requires_grad_();
  Tensor yr = tensor({1.5, 0.5, -0.7}).requires_grad_();
  (sin(xr) * yr * 2.0 + cos(xr) * 3.0).sum().backward();
  CHECK(allclose(x.grad(), xr.grad(), 1e-14, 1e-14));
  CHECK(allclose(y.grad(), yr.grad(), 1e-14, 1e-14));

  // An output the loss does not use gets a zero gradient.
  Tensor x2 = tensor({0.3, -1.2}).requires_grad_();
  std::vector<Tensor> only_cos =
      autograd::apply(std::make_shared<SinCos>(), {x2, tensor({1.0, 1.0})});
  only_cos[1].sum().backward();
  CHECK(allclose(x2.grad(), neg(sin(tensor({0.3, -1.2})))));

  // gradcheck through both outputs, and twice (create_graph records the backward's ops).
  auto both = [](const std::vector<Tensor>& in) {
    std::vector<Tensor> o = autograd::apply(std::make_shared<SinCos>(), in);
    return cat({o[0], o[1]});
  };
  CHECK_GRADCHECK(both, {tensor({0.3, -1.2, 2.0}), tensor({1.5, 0.5, -0.7})});
  auto first_grad = [](const std::vector<Tensor>& in) {
    const bool outer = GradMode::is_enabled();
    EnableGradGuard enable;
    Tensor leaf = outer ? in[0] : in[0].detach().requires_grad_();
    std::vector<Tensor> o = autograd::apply(std::make_shared<SinCos>(), {leaf, in[1]});
    return autograd::grad({(o[0] * o[1]).sum()}, {leaf}, {}, {.create_graph = outer})[0];
  };
  CHECK_GRADCHECK(first_grad, {tensor({0.3, -1.2, 2.0}), tensor({1.5, 0.5, -0.7})});
}

TEST_CASE("autograd::Function: saved tensors guard against in-place changes; bad backwards") {
  Tensor x = tensor({0.3, -1.2}).requires_grad_();
  Tensor y = tensor({1.0, 2.0});
  std::vector<Tensor> out = autograd::apply(std::make_shared<SinCos>(), {x, y});
  y.mul_(2.0);
  CHECK_THROWS_WITH(out[0].sum().backward(), Contains("SinCosBackward") && Contains("in-place"));

  Tensor z = tensor({1.0, 2.0}).requires_grad_();
  CHECK_THROWS_WITH(autograd::apply(std::make_shared<Broken>(), {z})[0].sum().backward(),
                    Contains("BrokenBackward: backward returned 2 gradients for 1 inputs"));
  auto wrong = std::make_shared<Broken>();
  wrong->wrong_shape = true;
  CHECK_THROWS_WITH(autograd::apply(wrong, {z})[0].sum().backward(),
                    Contains("gradient of shape [] for input 0 of shape [2]"));

  // Without grad mode, or without an input that requires grad, nothing is recorded.
  NoGradGuard no_grad;
  CHECK_FALSE(autograd::apply(std::make_shared<SinCos>(), {x, y})[0].requires_grad());
}
