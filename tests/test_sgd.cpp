// SGD against hand-computed steps and a scalar re-implementation of PyTorch's rule, plus the
// Optimizer base: groups, option checks, zero_grad and state_dict round trips.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/optim/sgd.h"
#include "parity.h"
#include "reference_loops.h"

using namespace kiln;
using kiln::testing::param;
using namespace kiln::optim;
using kiln::testing::check_close;
using kiln::testing::random_f64;
using kiln::testing::tolerance;

namespace {

// Runs `steps` steps of opt on p with the same gradient every time.
void run_constant(Optimizer& opt, Tensor& p, double grad, int steps) {
  for (int i = 0; i < steps; ++i) {
    p.set_grad(full(p.shape(), grad, p.dtype()));
    opt.step();
  }
}

// PyTorch's SGD on one element; `buf` is the momentum buffer, `has_buf` whether it exists yet.
struct SgdReference {
  SGDOptions o;
  std::vector<double> buf;
  std::vector<bool> has_buf;

  void step(std::vector<double>& p, const std::vector<double>& grad) {
    buf.resize(p.size());
    has_buf.resize(p.size(), false);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] + o.weight_decay * p[i];
      if (o.momentum != 0) {
        buf[i] = has_buf[i] ? o.momentum * buf[i] + (1 - o.dampening) * g : g;
        has_buf[i] = true;
        g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * g;
    }
  }
};

Tensor grad_for_step(const Tensor& p, int step) {
  return random_f64(p.shape(), 1000 + static_cast<uint64_t>(step)).to(p.dtype());
}

void check_against_reference(SGDOptions o, DType dtype) {
  Tensor p = random_f64({2, 3}, 7).to(dtype);
  p.requires_grad_();
  std::vector<double> expected = p.tolist();
  SgdReference ref{o, {}, {}};
  SGD opt({p}, o);
  for (int step = 0; step < 4; ++step) {
    Tensor g = grad_for_step(p, step);
    p.set_grad(g);
    opt.step();
    ref.step(expected, g.tolist());
  }
  check_close(p, expected, tolerance(dtype));
}

}  // namespace

TEST_CASE("sgd: plain steps by hand") {
  // p = 1, g = 0.5, lr = 0.1: each step subtracts 0.05, so 3 steps leave 0.85.
  Tensor p = param({1.0});
  SGD opt({p}, {.lr = 0.1});
  run_constant(opt, p, 0.5, 3);
  CHECK(p.item<double>() == Approx(0.85).epsilon(1e-15));
}

TEST_CASE("sgd: momentum by hand") {
  // buf1 = 0.5                     p = 1     - 0.1 * 0.5   = 0.95
  // buf2 = 0.9 * 0.5  + 0.5 = 0.95   p = 0.95  - 0.1 * 0.95  = 0.855
  // buf3 = 0.9 * 0.95 + 0.5 = 1.355  p = 0.855 - 0.1 * 1.355 = 0.7195
  Tensor p = param({1.0});
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  SGD opt({p}, o);
  run_constant(opt, p, 0.5, 3);
  CHECK(p.item<double>() == Approx(0.7195).epsilon(1e-14));
  // The buffer is its own copy: the gradient the user set is untouched by mul_/add_ on it.
  CHECK(p.grad().item<double>() == 0.5);
}

TEST_CASE("sgd: dampening by hand") {
  // The first step skips dampening (buf = g); later ones add (1 - 0.5) * g:
  // buf1 = 0.5                       p = 1    - 0.05  = 0.95
  // buf2 = 0.9 * 0.5 + 0.5 * 0.5 = 0.7  p = 0.95 - 0.07  = 0.88
  // buf3 = 0.9 * 0.7 + 0.25 = 0.88     p = 0.88 - 0.088 = 0.792
  Tensor p = param({1.0});
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.dampening = 0.5;
  SGD opt({p}, o);
  run_constant(opt, p, 0.5, 3);
  CHECK(p.item<double>() == Approx(0.792).epsilon(1e-14));
}

TEST_CASE("sgd: nesterov by hand") {
  // Nesterov steps along g + 0.9 * buf:
  // buf1 = 0.5    step = 0.5 + 0.45   = 0.95    p = 1      - 0.095   = 0.905
  // buf2 = 0.95   step = 0.5 + 0.855  = 1.355   p = 0.905  - 0.1355  = 0.7695
  // buf3 = 1.355  step = 0.5 + 1.2195 = 1.7195  p = 0.7695 - 0.17195 = 0.59755
  Tensor p = param({1.0});
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  SGD opt({p}, o);
  run_constant(opt, p, 0.5, 3);
  CHECK(p.item<double>() == Approx(0.59755).epsilon(1e-14));
}

TEST_CASE("sgd: weight decay by hand") {
  // g = 0.5 + 0.1 * p enters the momentum buffer:
  // g1 = 0.6       buf1 = 0.6                       p = 1      - 0.06     = 0.94
  // g2 = 0.594     buf2 = 0.54   + 0.594   = 1.134    p = 0.94   - 0.1134   = 0.8266
  // g3 = 0.58266   buf3 = 1.0206 + 0.58266 = 1.60326  p = 0.8266 - 0.160326 = 0.666274
  Tensor p = param({1.0});
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.1;
  SGD opt({p}, o);
  run_constant(opt, p, 0.5, 3);
  CHECK(p.item<double>() == Approx(0.666274).epsilon(1e-14));
  CHECK(p.grad().item<double>() == 0.5);
}

TEST_CASE("sgd: matches the reference rule on varying gradients, f64 and f32") {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    SGDOptions o;
    o.lr = 0.05;
    check_against_reference(o, dtype);
    o.momentum = 0.9;
    check_against_reference(o, dtype);
    o.dampening = 0.3;
    check_against_reference(o, dtype);
    o.dampening = 0;
    o.nesterov = true;
    o.weight_decay = 0.01;
    check_against_reference(o, dtype);
    o.nesterov = false;
    o.momentum = 0;
    check_against_reference(o, dtype);
  }
}

TEST_CASE("sgd: parameters without a gradient are skipped") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  SGD opt({a, b}, o);
  a.set_grad(tensor({1.0, 1.0}));
  opt.step();
  CHECK(a.tolist()[0] == Approx(0.9).epsilon(1e-15));
  CHECK(a.tolist()[1] == Approx(1.9).epsilon(1e-15));
  CHECK(b.item<double>() == 3.0);
  StateDict sd = opt.state_dict();
  CHECK(sd.count("state.0.momentum_buffer") == 1);
  CHECK(sd.count("state.1.momentum_buffer") == 0);
}

TEST_CASE("sgd: param groups keep their own lr") {
  // Group 1 overrides lr; group 0 takes the default; both take the default momentum.
  Tensor a = param({1.0}), b = param({1.0});
  SGDOptions o;
  o.lr = 0.1;
  SGD opt({{.params = {a}}, {.params = {b}, .lr = 0.01}}, o);
  REQUIRE(opt.num_param_groups() == 2);
  CHECK(opt.options(0).lr == 0.1);
  CHECK(opt.options(1).lr == 0.01);
  CHECK(opt.options(1).momentum == 0.0);
  CHECK(opt.lr(1) == 0.01);
  a.set_grad(tensor({2.0}));
  b.set_grad(tensor({2.0}));
  opt.step();
  CHECK(a.item<double>() == Approx(0.8).epsilon(1e-15));
  CHECK(b.item<double>() == Approx(0.98).epsilon(1e-15));
}

TEST_CASE("sgd: add_param_group after construction") {
  Tensor a = param({1.0}), b = param({1.0});
  SGD opt({a}, {.lr = 0.1});
  opt.add_param_group({.params = {b}, .lr = 0.5});
  a.set_grad(tensor({1.0}));
  b.set_grad(tensor({1.0}));
  opt.step();
  CHECK(a.item<double>() == Approx(0.9).epsilon(1e-15));
  CHECK(b.item<double>() == Approx(0.5).epsilon(1e-15));
  CHECK_THROWS_AS(opt.add_param_group({.params = {a}}), ValueError);
  CHECK_THROWS_WITH(opt.add_param_group({.params = {a}}), Catch::Contains("more than one group"));
  CHECK(opt.num_param_groups() == 2);
}

TEST_CASE("sgd: a state dict's unknown or misspelt option keys are rejected, naming them") {
  Tensor a = param({1.0});
  SGD opt({a}, {.lr = 0.1, .momentum = 0.9});
  StateDict misspelt = opt.state_dict();
  misspelt["param_groups.0.momentun"] = misspelt.at("param_groups.0.momentum");
  misspelt.erase("param_groups.0.momentum");
  CHECK_THROWS_AS(opt.load_state_dict(misspelt), ValueError);
  CHECK_THROWS_WITH(
      opt.load_state_dict(misspelt),
      Catch::Contains("SGD") && Catch::Contains("unknown option 'param_groups.0.momentun'"));
  misspelt.erase("param_groups.0.momentun");
  CHECK_THROWS_WITH(opt.load_state_dict(misspelt),
                    Catch::Contains("SGD") && Catch::Contains("missing 'param_groups.0.momentum'"));
  StateDict bad_flag = opt.state_dict();
  bad_flag["param_groups.0.nesterov"] = scalar_tensor(0.5, DType::f64);
  CHECK_THROWS_WITH(opt.load_state_dict(bad_flag),
                    Catch::Contains("'param_groups.0.nesterov' is a flag (0 or 1), got 0.5"));
  CHECK(opt.options(0).momentum == 0.9);
}

TEST_CASE("sgd: invalid hyperparameters are rejected") {
  Tensor a = param({1.0});
  SGDOptions negative_lr;
  negative_lr.lr = -0.1;
  CHECK_THROWS_AS(SGD({a}, negative_lr), ValueError);
  CHECK_THROWS_WITH(SGD({a}, negative_lr), Catch::Contains("SGD") && Catch::Contains("-0.1"));

  SGDOptions nesterov_alone;
  nesterov_alone.nesterov = true;
  CHECK_THROWS_AS(SGD({a}, nesterov_alone), ValueError);
  CHECK_THROWS_WITH(SGD({a}, nesterov_alone), Catch::Contains("Nesterov"));

  SGDOptions nesterov_damped;
  nesterov_damped.nesterov = true;
  nesterov_damped.momentum = 0.9;
  nesterov_damped.dampening = 0.1;
  CHECK_THROWS_AS(SGD({a}, nesterov_damped), ValueError);

  SGDOptions negative_decay;
  negative_decay.weight_decay = -1;
  CHECK_THROWS_AS(SGD({a}, negative_decay), ValueError);

  // A group's own options are checked too, not only the defaults.
  CHECK_THROWS_AS(SGD({{.params = {a}, .lr = -1.0}}, {}), ValueError);
  SGD opt({a}, {});
  Tensor b = param({1.0});
  CHECK_THROWS_AS(opt.add_param_group({.params = {b}, .momentum = -0.5}), ValueError);
  CHECK(opt.num_param_groups() == 1);
  // Options changed between steps are checked by the next step.
  opt.options(0).lr = -1.0;
  a.set_grad(tensor({1.0}));
  CHECK_THROWS_WITH(opt.step(), Catch::Contains("SGD") && Catch::Contains("-1"));
  CHECK(a.item<double>() == 1.0);
}

TEST_CASE("sgd: bad parameter lists are rejected") {
  Tensor a = param({1.0});
  CHECK_THROWS_AS(SGD(std::vector<SGDParamGroup>{}, {}), ValueError);
  CHECK_THROWS_AS(SGD(std::vector<Tensor>{}, {}), ValueError);
  CHECK_THROWS_AS(SGD({a, a}, {}), ValueError);
  Tensor non_leaf = mul(a, 2.0);
  CHECK_THROWS_AS(SGD({non_leaf}, {}), ValueError);
  CHECK_THROWS_WITH(SGD({non_leaf}, {}), Catch::Contains("leaf"));
  CHECK_THROWS_AS(SGD({Tensor()}, {}), ValueError);
}

TEST_CASE("sgd: zero_grad drops every gradient") {
  Tensor a = param({1.0}), b = param({2.0});
  SGD opt({{.params = {a}}, {.params = {b}}}, {});
  a.set_grad(tensor({1.0}));
  b.set_grad(tensor({1.0}));
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
}

TEST_CASE("sgd: a real backward pass drives the step") {
  // loss = sum(p^2) has gradient 2p: p = [1, -2] with lr 0.25 halves each element.
  Tensor p = param({1.0, -2.0});
  SGD opt({p}, {.lr = 0.25});
  sum(mul(p, p)).backward();
  opt.step();
  CHECK(p.tolist() == std::vector<double>{0.5, -1.0});
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());
}

TEST_CASE("sgd: state_dict names options and buffers") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  SGD opt({{.params = {a}}, {.params = {b}, .lr = 0.2}}, o);
  a.set_grad(tensor({1.0, 1.0}));
  b.set_grad(tensor({1.0}));
  opt.step();
  StateDict sd = opt.state_dict();
  CHECK(sd.at("param_groups.0.lr").item<double>() == 0.1);
  CHECK(sd.at("param_groups.1.lr").item<double>() == 0.2);
  CHECK(sd.at("param_groups.1.nesterov").item<double>() == 1.0);
  CHECK(sd.at("param_groups.0.momentum").dtype() == DType::f64);
  CHECK(sd.at("state.0.momentum_buffer").shape() == Shape{2});
  CHECK(sd.at("state.1.momentum_buffer").shape() == Shape{1});
}

TEST_CASE("sgd: save after 3 steps, resume for 3 == 6 straight steps (bit-exact)") {
  SGDOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  Tensor a0 = random_f64({3, 2}, 1), b0 = random_f64({4}, 2);
  auto leaf = [](const Tensor& t) {
    Tensor c = t.detach().clone();
    c.requires_grad_();
    return c;
  };
  auto groups = [&](const Tensor& a, const Tensor& b) {
    return std::vector<SGDParamGroup>{{.params = {a}}, {.params = {b}, .lr = 0.02}};
  };
  auto run = [](SGD& opt, Tensor& a, Tensor& b, int from, int to) {
    for (int step = from; step < to; ++step) {
      a.set_grad(grad_for_step(a, step));
      b.set_grad(grad_for_step(b, 100 + step));
      opt.step();
    }
  };

  Tensor a = leaf(a0), b = leaf(b0);
  SGD straight(groups(a, b), o);
  run(straight, a, b, 0, 6);

  Tensor a1 = leaf(a0), b1 = leaf(b0);
  SGD first(groups(a1, b1), o);
  run(first, a1, b1, 0, 3);
  StateDict saved = first.state_dict();

  // The fresh optimizer starts from other options; loading replaces them.
  Tensor a2 = leaf(a1), b2 = leaf(b1);
  SGD resumed(groups(a2, b2), {.lr = 0.5});
  resumed.load_state_dict(saved);
  CHECK(resumed.options(1).lr == 0.02);
  CHECK(resumed.options(0).momentum == 0.9);
  run(resumed, a2, b2, 3, 6);
  CHECK(equal(a2, a));
  CHECK(equal(b2, b));
}

TEST_CASE("sgd: load_state_dict copies the state instead of aliasing it") {
  Tensor a = param({1.0});
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  SGD opt({a}, o);
  run_constant(opt, a, 0.5, 1);
  StateDict saved = opt.state_dict();
  Tensor b = param({1.0});
  SGD other({b}, o);
  other.load_state_dict(saved);
  saved.at("state.0.momentum_buffer").fill_(100.0);
  CHECK(other.state_dict().at("state.0.momentum_buffer").item<double>() == 0.5);
}

TEST_CASE("sgd: load_state_dict rejects a mismatched state and changes nothing") {
  Tensor a = param({1.0, 2.0, 3.0});
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  SGD opt({a}, o);
  run_constant(opt, a, 0.5, 1);
  StateDict saved = opt.state_dict();

  Tensor b = param({1.0, 2.0, 3.0, 4.0});
  SGD other({b}, {.lr = 0.3});
  CHECK_THROWS_AS(other.load_state_dict(saved), ShapeError);
  CHECK_THROWS_WITH(other.load_state_dict(saved), Catch::Contains("SGD.load_state_dict") &&
                                                      Catch::Contains("state.0.momentum_buffer") &&
                                                      Catch::Contains("[3]") &&
                                                      Catch::Contains("[4]"));
  CHECK(other.options(0).lr == 0.3);
  CHECK(other.state_dict().count("state.0.momentum_buffer") == 0);

  StateDict missing = saved;
  missing.erase("param_groups.0.dampening");
  Tensor c = param({1.0, 2.0, 3.0});
  SGD third({c}, o);
  CHECK_THROWS_AS(third.load_state_dict(missing), ValueError);
  CHECK_THROWS_WITH(third.load_state_dict(missing), Catch::Contains("param_groups.0.dampening"));

  StateDict extra_param = saved;
  extra_param["state.1.momentum_buffer"] = tensor({1.0});
  CHECK_THROWS_AS(third.load_state_dict(extra_param), ValueError);

  StateDict extra_group = saved;
  extra_group["param_groups.1.lr"] = scalar_tensor(0.1, DType::f64);
  CHECK_THROWS_AS(third.load_state_dict(extra_group), ValueError);

  StateDict bad_value = saved;
  bad_value["param_groups.0.lr"] = scalar_tensor(-1.0, DType::f64);
  CHECK_THROWS_AS(third.load_state_dict(bad_value), ValueError);
}

TEST_CASE("sgd: SGD(params) takes PyTorch's defaults") {
  Tensor p = zeros({3}).requires_grad_();
  optim::SGD sgd({p});
  const SGDOptions& o = sgd.options(0);
  CHECK(o.lr == 1e-3);
  CHECK(o.momentum == 0.0);
  CHECK(o.weight_decay == 0.0);
}
