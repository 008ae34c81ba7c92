// autograd::grad and double backward (create_graph): gradients returned without touching .grad,
// only the nodes that lead to an input run, allow_unused, hooks; second derivatives against
// PyTorch 1.13 (tests/reference/double_backward.json, make_double_backward.py): a WGAN-GP
// gradient penalty on an MLP and Hessian-vector products of the ops people differentiate twice;
// the refusal of ops whose backward is a kernel; anomaly detection naming the node.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/ops/autograd/record.h"
#include "torch_reference.h"

using namespace kiln;
using Catch::Contains;
using kiln::testing::check_against_torch;
using kiln::testing::doubles;
using kiln::testing::shape_of;
using kiln::testing::torch_reference;
using nlohmann::json;

TEST_CASE("autograd::grad returns gradients and leaves .grad alone") {
  Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor w = tensor({0.5, -1.0, 2.0}).requires_grad_();
  Tensor y = (x * x * w).sum();
  std::vector<Tensor> g = autograd::grad({y}, {x});
  CHECK(allclose(g[0], tensor({1.0, -4.0, 12.0})));
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());
  CHECK_FALSE(g[0].requires_grad());
  // The graph was freed (retain_graph follows create_graph, false here).
  CHECK_THROWS_WITH(autograd::grad({y}, {x}), Contains("second time"));

  // A non-leaf input takes the gradient arriving at it; grad_outputs weight each output.
  Tensor h = x * 2.0;
  Tensor z = h * h;
  std::vector<Tensor> gh = autograd::grad({z}, {h, x}, {tensor({1.0, 1.0, 0.5})});
  CHECK(allclose(gh[0], tensor({4.0, 8.0, 6.0})));
  CHECK(allclose(gh[1], tensor({8.0, 16.0, 12.0})));

  // Leaf hooks apply to what is returned, as they would to .grad.
  Tensor a = tensor({1.0, 1.0}).requires_grad_();
  a.register_hook([](const Tensor& grad) { return grad * 3.0; });
  CHECK(allclose(autograd::grad({(a * 2.0).sum()}, {a})[0], tensor({6.0, 6.0})));
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("autograd::grad runs only what leads to its inputs, and says what it cannot do") {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor unused = tensor({3.0}).requires_grad_();
  int hook_runs = 0;
  Tensor other = tensor({4.0, 5.0}).requires_grad_();
  Tensor side = other * 2.0;
  side.register_hook([&hook_runs](const Tensor&) {
    ++hook_runs;
    return Tensor();
  });
  Tensor y = (x * x).sum() + side.sum();
  CHECK_THROWS_WITH(autograd::grad({y}, {x, unused}, {}, {.retain_graph = true}),
                    Contains("autograd::grad: input 1") && Contains("allow_unused"));
  std::vector<Tensor> g = autograd::grad({y}, {x, unused}, {}, {.allow_unused = true});
  CHECK(allclose(g[0], tensor({2.0, 4.0})));
  CHECK_FALSE(g[1].defined());
  CHECK(hook_runs == 0);  // the branch to `other` leads to no input, so it did not run

  Tensor plain = tensor({1.0});
  CHECK_THROWS_WITH(autograd::grad({(x * 2.0).sum()}, {plain}),
                    Contains("input 0 does not require grad"));
  CHECK_THROWS_WITH(autograd::grad({plain}, {x}), Contains("output 0 does not require grad"));
  CHECK_THROWS_WITH(autograd::grad({x * 2.0}, {x}), Contains("one element"));
  CHECK_THROWS_AS(autograd::grad({(x * 2.0).sum()}, {x}, {Tensor(), Tensor()}), ValueError);
}

TEST_CASE("create_graph: second derivatives of x^3, through autograd::grad and backward") {
  Tensor x = tensor({-1.0, 0.5, 2.0}).requires_grad_();
  Tensor y = (x * x * x).sum();
  Tensor dy = autograd::grad({y}, {x}, {}, {.create_graph = true})[0];
  CHECK(allclose(dy, tensor({3.0, 0.75, 12.0})));
  REQUIRE(dy.requires_grad());
  Tensor d2 = autograd::grad({dy.sum()}, {x})[0];
  CHECK(allclose(d2, tensor({-6.0, 3.0, 12.0})));
  // Third derivative: 6 everywhere.
  Tensor x2 = tensor({1.0, 4.0}).requires_grad_();
  Tensor g1 = autograd::grad({x2.pow(3.0).sum()}, {x2}, {}, {.create_graph = true})[0];
  Tensor g2 = autograd::grad({g1.sum()}, {x2}, {}, {.create_graph = true})[0];
  Tensor g3 = autograd::grad({g2.sum()}, {x2})[0];
  CHECK(allclose(g3, tensor({6.0, 6.0})));

  // backward(create_graph) leaves a .grad with history, as PyTorch's.
  Tensor w = tensor({2.0, 3.0}).requires_grad_();
  (w.pow(3.0)).sum().backward(Tensor(), false, true);
  REQUIRE(w.grad().requires_grad());
  Tensor second = autograd::grad({w.grad().sum()}, {w})[0];
  CHECK(allclose(second, tensor({12.0, 18.0})));
  // A .grad with history holds the graph that holds the leaf: a reference cycle (PyTorch warns of
  // the same), broken by dropping the gradient.
  w.zero_grad();
}

TEST_CASE("double backward equals PyTorch 1.13's: Hessian-vector products") {
  const json reference = torch_reference("double_backward.json");
  const std::map<std::string, std::function<Tensor(const Tensor&)>> ops = {
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"softplus", [](const Tensor& x) { return softplus(x); }},
      {"elu", [](const Tensor& x) { return elu(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"reciprocal_shifted", [](const Tensor& x) { return reciprocal(x + 2.0); }},
      {"log_shifted", [](const Tensor& x) { return log(x + 2.0); }},
      {"sqrt_shifted", [](const Tensor& x) { return sqrt(x + 2.0); }},
      {"cube", [](const Tensor& x) { return x.pow(3.0); }},
      {"softmax", [](const Tensor& x) { return softmax(x, 1); }},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, 1); }},
      {"layer_norm", [](const Tensor& x) { return layer_norm(x, {5}); }},
      {"norm_rows", [](const Tensor& x) { return norm(x, 2.0, {1}); }},
      {"var_rows", [](const Tensor& x) { return var(x, {1}); }},
      {"matmul_self", [](const Tensor& x) { return matmul(x, x.t()); }},
      {"cat_slices",
       [](const Tensor& x) {
         Tensor pairs = (x.slice(1, 1, 3) * x.slice(1, 0, 2)).flatten();
         return exp(cat({pairs, x[1] * x[2]}));
       }},
      {"max_rows", [](const Tensor& x) { return amax(x * x, {1}); }},
  };
  const json& cases = reference.at("hvp");
  REQUIRE(cases.size() == ops.size());
  for (const json& c : cases) {
    const std::string name = c.at("op");
    INFO(name);
    Tensor x = tensor(doubles(c.at("x")), {3, 5}).requires_grad_();
    Tensor out = ops.at(name)(x);
    Tensor w = tensor(doubles(c.at("w")), shape_of(c.at("shape")));
    Tensor v = tensor(doubles(c.at("v")), {3, 5});
    Tensor g = autograd::grad({(out * w).sum()}, {x}, {}, {.create_graph = true})[0];
    check_against_torch(g, doubles(c.at("grad")), 1e-12);
    Tensor hv = autograd::grad({(g * v).sum()}, {x})[0];
    check_against_torch(hv, doubles(c.at("hvp")), 1e-10);
  }
}

TEST_CASE("double backward equals PyTorch 1.13's: a gradient penalty on an MLP") {
  const json reference = torch_reference("double_backward.json");
  const json& c = reference.at("penalty");
  std::map<std::string, Tensor> p;
  for (const std::string name : {"w1", "b1", "w2", "b2", "w3", "b3"})
    p[name] = tensor(doubles(c.at("params").at(name)), shape_of(c.at("shapes").at(name)))
                  .requires_grad_();
  Tensor x = tensor(doubles(c.at("x")), {4, 5}).requires_grad_();
  auto critic = [&](const Tensor& in) {
    Tensor h = tanh(linear(in, p["w1"], p["b1"]));
    h = relu(linear(h, p["w2"], p["b2"]));
    return linear(h, p["w3"], p["b3"]);
  };
  Tensor out = critic(x);
  Tensor gx = autograd::grad({out.sum()}, {x}, {}, {.create_graph = true})[0];
  check_against_torch(gx, doubles(c.at("grad_x")), 1e-12);
  Tensor penalty = ((norm(gx, 2.0, {1}) - 1.0).pow(2.0)).mean();
  Tensor loss = out.mean() + penalty * 10.0;
  CHECK(loss.item() == Approx(c.at("loss").get<double>()).epsilon(1e-12));
  loss.backward();
  for (const auto& [name, param] : p) {
    INFO(name);
    check_against_torch(param.grad(), doubles(c.at("grads").at(name)), 1e-10);
  }
  check_against_torch(x.grad(), doubles(c.at("x_grad")), 1e-10);
}

namespace {

// A node whose backward is a kernel of its own (as the GPU's fused cross_entropy's): it does not
// say differentiable_backward, so a gradient recorded through it refuses a second backward.
struct DoubledBackward : Node {
  std::string name() const override { return "DoubledBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override { return {mul(g.detach(), 2.0)}; }
};

Tensor doubled(const Tensor& x) {
  Tensor out = mul(x.detach(), 2.0);
  record(out, std::make_shared<DoubledBackward>(), {&x});
  return out;
}

}  // namespace

TEST_CASE("create_graph through a backward kernel: the second backward names the op") {
  // The first derivative is right, the second refuses rather than coming out zero.
  Tensor x = tensor({{0.5, 2.0, -1.5}, {1.5, 0.25, 3.0}}).requires_grad_();
  Tensor g = autograd::grad({doubled(x * x).sum()}, {x}, {}, {.create_graph = true})[0];
  CHECK(allclose(g, mul(x, 4.0)));
  REQUIRE(g.requires_grad());
  CHECK_THROWS_WITH(autograd::grad({g.sum()}, {x}),
                    Contains("DoubledBackward") && Contains("not differentiable"));
  // cumprod's and batch norm's backward kernels compose differentiable ops when recorded: their
  // second derivatives (test_op_gradients checks every entry) are here exact around a zero.
  Tensor z = tensor({{0.5, 0.0, -1.5, 2.0}}).requires_grad_();  // f64
  auto cumprod_gradient = [](const std::vector<Tensor>& in) {
    const bool outer = GradMode::is_enabled();
    EnableGradGuard enable;
    Tensor leaf = outer ? in[0] : in[0].detach().requires_grad_();
    return autograd::grad({mul(cumprod(leaf, 1), leaf).sum()}, {leaf}, {},
                          {.create_graph = outer})[0];
  };
  CHECK_GRADCHECK(cumprod_gradient, {z});
  // Pooling's backward kernels differentiate again through their transposes.
  manual_seed(0);
  Tensor image = randn({1, 2, 5, 5}, DType::f64).requires_grad_();
  auto pooled_gradient = [](const std::vector<Tensor>& in) {
    // gradcheck differentiates this (recording) and evaluates its differences (not recording).
    const bool outer = GradMode::is_enabled();
    EnableGradGuard enable;
    Tensor leaf = outer ? in[0] : in[0].detach().requires_grad_();
    Tensor y = max_pool2d(leaf * leaf, 3, 2, 1).sum() + avg_pool2d(leaf.pow(3.0), 2).sum();
    return autograd::grad({y}, {leaf}, {}, {.create_graph = outer})[0];
  };
  CHECK_GRADCHECK(pooled_gradient, {image});
}

TEST_CASE("anomaly detection names the node whose backward made a NaN") {
  Tensor x = tensor({0.0, 1.0}).requires_grad_();
  // sqrt's gradient at 0 is inf; times the zero upstream gradient, NaN.
  auto loss = [&] { return (sqrt(x) * 0.0).sum(); };
  loss().backward();
  CHECK(std::isnan(x.grad().tolist()[0]));
  x.zero_grad();
  {
    DetectAnomalyGuard anomaly;
    CHECK_THROWS_WITH(loss().backward(), Contains("SqrtBackward") && Contains("NaN"));
  }
  CHECK_FALSE(AnomalyMode::is_enabled());
  CHECK_NOTHROW(loss().backward());
}
