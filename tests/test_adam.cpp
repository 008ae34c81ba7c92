// Adam and AdamW against hand-computed steps and a scalar re-implementation of PyTorch's rule
// (bias correction, L2 vs decoupled weight decay, amsgrad), option checks and state_dict resume.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/optim/adam.h"
#include "parity.h"
#include "reference_loops.h"

using namespace kiln;
using kiln::testing::param;
using namespace kiln::optim;
using kiln::testing::check_close;
using kiln::testing::random_f64;
using kiln::testing::tolerance;

namespace {

AdamOptions options(double lr, double beta1, double beta2, double eps, double weight_decay = 0,
                    bool amsgrad = false) {
  AdamOptions o;
  o.lr = lr;
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.eps = eps;
  o.weight_decay = weight_decay;
  o.amsgrad = amsgrad;
  return o;
}

// torch.optim.Adam / AdamW (single-tensor path) on each element, in double.
struct AdamReference {
  AdamOptions o;
  bool decoupled;
  std::vector<double> m, v, v_max;
  int t = 0;

  void step(std::vector<double>& p, const std::vector<double>& grad) {
    m.resize(p.size(), 0.0);
    v.resize(p.size(), 0.0);
    v_max.resize(p.size(), 0.0);
    ++t;
    const double bias1 = 1 - std::pow(o.beta1, t), bias2 = 1 - std::pow(o.beta2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (decoupled)
        p[i] *= 1 - o.lr * o.weight_decay;
      else
        g += o.weight_decay * p[i];
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      v_max[i] = std::max(v_max[i], v[i]);
      const double second = o.amsgrad ? v_max[i] : v[i];
      p[i] -= o.lr / bias1 * m[i] / (std::sqrt(second) / std::sqrt(bias2) + o.eps);
    }
  }
};

Tensor grad_for_step(const Tensor& p, int step) {
  return random_f64(p.shape(), 2000 + static_cast<uint64_t>(step), -2.0, 2.0).to(p.dtype());
}

// The same numbers as AdamW's own options struct (whose default weight_decay is 0.01, not 0).
AdamWOptions adamw(const AdamOptions& o) {
  return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad};
}

void check_against_reference(AdamOptions o, bool decoupled, DType dtype) {
  Tensor p = random_f64({3, 4}, 11).to(dtype);
  p.requires_grad_();
  std::vector<double> expected = p.tolist();
  AdamReference ref{o, decoupled, {}, {}, {}};
  std::unique_ptr<Adam> opt;
  if (decoupled)
    opt = std::make_unique<AdamW>(std::vector<Tensor>{p}, adamw(o));
  else
    opt = std::make_unique<Adam>(std::vector<Tensor>{p}, o);
  for (int step = 0; step < 3; ++step) {
    Tensor g = grad_for_step(p, step);
    p.set_grad(g);
    opt->step();
    ref.step(expected, g.tolist());
  }
  check_close(p, expected, tolerance(dtype));
}

// Gradients 1, 2, -1 on p = 1, for the hand-computed cases below.
void run_hand_sequence(Optimizer& opt, Tensor& p) {
  for (double g : {1.0, 2.0, -1.0}) {
    p.set_grad(tensor({g}));
    opt.step();
  }
}

}  // namespace

TEST_CASE("adam: constant gradient by hand") {
  // With a constant g the bias-corrected moments are exactly g and g^2, so every step moves
  // lr * g / (|g| + eps) = 0.1 * 0.5 / (0.5 + 1e-8) = 0.1 / (1 + 2e-8): 3 steps leave 0.7 + 6e-9.
  Tensor p = param({1.0});
  Adam opt({p}, options(0.1, 0.9, 0.999, 1e-8));
  for (int i = 0; i < 3; ++i) {
    p.set_grad(tensor({0.5}));
    opt.step();
  }
  CHECK(p.item<double>() == Approx(0.700000006).margin(1e-13));
}

TEST_CASE("adam: varying gradients by hand") {
  // betas 0.5, eps 0: bias1 = bias2 = 1 - 0.5^t.
  // t=1, g=1:  m = 0.5,  v = 0.5,   corrected 1 and 1       step 0.1                     p = 0.9
  // t=2, g=2:  m = 1.25, v = 2.25,  bias 0.75: step 0.1/0.75 * 1.25 / (1.5/sqrt(0.75))
  //                                 = 0.5 / (3 sqrt 3) = 0.0962250449               p =
  //                                 0.8037749551
  // t=3, g=-1: m = 0.125, v = 1.625, bias 0.875: step 0.1/0.875 * 0.125 * sqrt(0.875/1.625)
  //                                 = -0.1 / sqrt(91) ... moves p by -0.0104828484  p =
  //                                 0.7932921068
  Tensor p = param({1.0});
  Adam opt({p}, options(0.1, 0.5, 0.5, 0.0));
  run_hand_sequence(opt, p);
  CHECK(p.item<double>() == Approx(0.7932921067678432).epsilon(1e-14));
}

TEST_CASE("adam: amsgrad by hand") {
  // As above until t=3, where v_max = max(2.25, 1.625) = 2.25 replaces v = 1.625:
  // step 0.1/0.875 * 0.125 * sqrt(0.875/2.25) = 0.1 / sqrt(126) = 0.0089087081  p = 0.7948662471
  Tensor p = param({1.0});
  Adam opt({p}, options(0.1, 0.5, 0.5, 0.0, 0.0, true));
  run_hand_sequence(opt, p);
  CHECK(p.item<double>() == Approx(0.7948662470713149).epsilon(1e-14));
  CHECK(opt.state_dict().at("state.0.max_exp_avg_sq").item<double>() ==
        Approx(2.25).epsilon(1e-15));
}

TEST_CASE("adam: AdamW decoupled weight decay by hand") {
  // Each step first shrinks p by 1 - lr * wd = 0.95, then takes the Adam step above:
  // p = 1 * 0.95 - 0.1 = 0.85;  p = 0.85 * 0.95 - 0.0962250449 = 0.7112749551;
  // p = 0.7112749551 * 0.95 - 0.0104828484 = 0.6652283590
  Tensor p = param({1.0});
  AdamW opt({p}, adamw(options(0.1, 0.5, 0.5, 0.0, 0.5)));
  CHECK(opt.name() == "AdamW");
  run_hand_sequence(opt, p);
  CHECK(p.item<double>() == Approx(0.66522835901109).epsilon(1e-14));
}

TEST_CASE("adam: matches the reference rule, f64 and f32") {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    for (bool decoupled : {false, true}) {
      INFO("decoupled " << decoupled);
      check_against_reference(options(0.01, 0.9, 0.999, 1e-8), decoupled, dtype);
      check_against_reference(options(0.01, 0.9, 0.999, 1e-8, 0.1), decoupled, dtype);
      check_against_reference(options(0.01, 0.8, 0.99, 1e-6, 0.0, true), decoupled, dtype);
      check_against_reference(options(0.05, 0.0, 0.5, 1e-3, 0.2, true), decoupled, dtype);
    }
  }
}

TEST_CASE("adam: L2 weight decay enters the moments, not the gradient") {
  // Adam adds wd * p to the gradient it uses but leaves p.grad as the user set it.
  Tensor p = param({2.0});
  Adam opt({p}, options(0.1, 0.9, 0.999, 1e-8, 0.5));
  p.set_grad(tensor({1.0}));
  opt.step();
  CHECK(p.grad().item<double>() == 1.0);
  // g = 1 + 0.5 * 2 = 2, so exp_avg = 0.1 * 2 after one step.
  CHECK(opt.state_dict().at("state.0.exp_avg").item<double>() == Approx(0.2).epsilon(1e-15));
}

TEST_CASE("adam: parameters without a gradient are skipped and keep their own step count") {
  // b first gets a gradient at the second step, so its bias correction starts from t = 1 there.
  Tensor a = param({1.0}), b = param({1.0});
  Adam opt({a, b}, options(0.1, 0.5, 0.5, 0.0));
  a.set_grad(tensor({1.0}));
  opt.step();
  CHECK(b.item<double>() == 1.0);
  CHECK(opt.state_dict().count("state.1.step") == 0);
  b.set_grad(tensor({1.0}));
  opt.step();
  StateDict sd = opt.state_dict();
  CHECK(sd.at("state.0.step").item<double>() == 2.0);
  CHECK(sd.at("state.1.step").item<double>() == 1.0);
  CHECK(sd.at("state.1.step").dim() == 0);
  CHECK(b.item<double>() == Approx(0.9).epsilon(1e-15));
}

TEST_CASE("adam: param groups keep their own lr and betas") {
  Tensor a = param({1.0}), b = param({1.0});
  Adam opt({{.params = {a}}, {.params = {b}, .lr = 0.01, .beta1 = 0.5}},
           options(0.1, 0.9, 0.999, 0.0));
  CHECK(opt.options(1).beta2 == 0.999);
  CHECK(opt.options(1).beta1 == 0.5);
  CHECK(opt.options(0).beta1 == 0.9);
  a.set_grad(tensor({3.0}));
  b.set_grad(tensor({3.0}));
  opt.step();
  // The first bias-corrected step is lr * sign(g) for any betas when eps = 0.
  CHECK(a.item<double>() == Approx(0.9).epsilon(1e-15));
  CHECK(b.item<double>() == Approx(0.99).epsilon(1e-15));
}

TEST_CASE("adam: amsgrad switched on later starts its maximum from the current state") {
  Tensor p = param({1.0});
  Adam opt({p}, options(0.1, 0.5, 0.5, 0.0));
  p.set_grad(tensor({1.0}));
  opt.step();
  opt.options(0).amsgrad = true;
  p.set_grad(tensor({2.0}));
  opt.step();
  // max(0, v) = v: the second step is the plain Adam step of the hand sequence.
  CHECK(p.item<double>() == Approx(0.8037749551350624).epsilon(1e-14));
}

TEST_CASE("adam: unknown or missing option keys in a state dict are rejected") {
  Tensor a = param({1.0});
  Adam adam({a});
  StateDict misspelt = adam.state_dict();
  misspelt["param_groups.0.momentum"] = misspelt.at("param_groups.0.beta1");
  CHECK_THROWS_AS(adam.load_state_dict(misspelt), ValueError);
  CHECK_THROWS_WITH(
      adam.load_state_dict(misspelt),
      Catch::Contains("Adam") && Catch::Contains("unknown option 'param_groups.0.momentum'"));
  AdamW adamw({a});
  StateDict missing = adamw.state_dict();
  missing.erase("param_groups.0.beta2");
  CHECK_THROWS_WITH(adamw.load_state_dict(missing),
                    Catch::Contains("AdamW") && Catch::Contains("missing 'param_groups.0.beta2'"));
}

TEST_CASE("adam: invalid hyperparameters are rejected") {
  Tensor a = param({1.0});
  CHECK_THROWS_AS(Adam({a}, options(-1e-3, 0.9, 0.999, 1e-8)), ValueError);
  CHECK_THROWS_WITH(Adam({a}, options(-1e-3, 0.9, 0.999, 1e-8)),
                    Catch::Contains("Adam") && Catch::Contains("lr"));
  CHECK_THROWS_AS(Adam({a}, options(1e-3, 1.0, 0.999, 1e-8)), ValueError);
  CHECK_THROWS_WITH(Adam({a}, options(1e-3, 1.0, 0.999, 1e-8)),
                    Catch::Contains("betas must be in [0, 1)"));
  CHECK_THROWS_AS(Adam({a}, options(1e-3, -0.1, 0.999, 1e-8)), ValueError);
  CHECK_THROWS_AS(Adam({a}, options(1e-3, 0.9, 1.0, 1e-8)), ValueError);
  CHECK_THROWS_AS(AdamW({a}, adamw(options(1e-3, 0.9, 1.5, 1e-8))), ValueError);
  CHECK_THROWS_AS(Adam({a}, options(1e-3, 0.9, 0.999, -1e-8)), ValueError);
  CHECK_THROWS_AS(AdamW({a}, adamw(options(1e-3, 0.9, 0.999, 1e-8, -0.01))), ValueError);
  CHECK_THROWS_AS(Adam({{.params = {a}, .beta2 = 1.0}}, {}), ValueError);
  CHECK_NOTHROW(Adam({a}, options(0.0, 0.0, 0.0, 0.0)));
}

TEST_CASE("adam: save after 3 steps, resume for 3 == 6 straight steps (bit-exact)") {
  for (bool decoupled : {false, true}) {
    INFO("decoupled " << decoupled);
    AdamOptions o = options(0.02, 0.9, 0.99, 1e-8, 0.05, true);
    Tensor a0 = random_f64({2, 3}, 3).to(DType::f32), b0 = random_f64({5}, 4);
    auto leaf = [](const Tensor& t) {
      Tensor c = t.detach().clone();
      c.requires_grad_();
      return c;
    };
    auto make = [&](const Tensor& a, const Tensor& b, AdamOptions opts) -> std::unique_ptr<Adam> {
      std::vector<AdamParamGroup> groups{{.params = {a}}, {.params = {b}, .lr = 0.01}};
      if (decoupled) return std::make_unique<AdamW>(std::move(groups), adamw(opts));
      return std::make_unique<Adam>(std::move(groups), opts);
    };
    auto run = [](Adam& opt, Tensor& a, Tensor& b, int from, int to) {
      for (int step = from; step < to; ++step) {
        a.set_grad(grad_for_step(a, step));
        b.set_grad(grad_for_step(b, 50 + step));
        opt.step();
      }
    };

    Tensor a = leaf(a0), b = leaf(b0);
    auto straight = make(a, b, o);
    run(*straight, a, b, 0, 6);

    Tensor a1 = leaf(a0), b1 = leaf(b0);
    auto first = make(a1, b1, o);
    run(*first, a1, b1, 0, 3);
    StateDict saved = first->state_dict();
    CHECK(saved.at("state.0.step").item<double>() == 3.0);
    CHECK(saved.count("state.1.max_exp_avg_sq") == 1);

    Tensor a2 = leaf(a1), b2 = leaf(b1);
    auto resumed = make(a2, b2, AdamOptions{});
    resumed->load_state_dict(saved);
    run(*resumed, a2, b2, 3, 6);
    CHECK(equal(a2, a));
    CHECK(equal(b2, b));
  }
}

TEST_CASE("adam: load_state_dict rejects a shape mismatch") {
  Tensor a = param({1.0, 2.0});
  Adam opt({a}, {});
  a.set_grad(tensor({1.0, 1.0}));
  opt.step();
  StateDict saved = opt.state_dict();
  Tensor b = param({1.0, 2.0, 3.0});
  Adam other({b}, {});
  CHECK_THROWS_AS(other.load_state_dict(saved), ShapeError);
  CHECK_THROWS_WITH(other.load_state_dict(saved),
                    Catch::Contains("Adam.load_state_dict") && Catch::Contains("state.0.exp_avg"));
  CHECK(other.state_dict().count("state.0.step") == 0);
}

TEST_CASE("adam: loaded state takes the parameter's dtype") {
  // A state saved from f64 parameters resumes f32 ones with f32 moments (the step stays f64).
  Tensor a = param({1.0, 2.0});
  Adam opt({a}, {});
  a.set_grad(tensor({1.0, 1.0}));
  opt.step();
  Tensor b = param({1.0, 2.0}, DType::f32);
  Adam other({b}, {});
  other.load_state_dict(opt.state_dict());
  StateDict sd = other.state_dict();
  CHECK(sd.at("state.0.exp_avg").dtype() == DType::f32);
  CHECK(sd.at("state.0.step").dtype() == DType::f64);
  b.set_grad(tensor({1.0f, 1.0f}));
  CHECK_NOTHROW(other.step());
}

TEST_CASE("adam: Adam(params) and AdamW(params) take PyTorch's defaults") {
  Tensor p = zeros({3}).requires_grad_();
  optim::Adam adam({p});
  const AdamOptions& o = adam.options(0);
  CHECK(o.lr == 1e-3);
  CHECK(o.beta1 == 0.9);
  CHECK(o.beta2 == 0.999);
  CHECK(o.eps == 1e-8);
  CHECK(o.weight_decay == 0.0);
  optim::AdamW adamw_default({p});
  CHECK(adamw_default.options(0).weight_decay == 0.01);
  CHECK(adamw_default.options(0).lr == 1e-3);
  // Setting another field keeps AdamW's own weight decay (its options struct is its own).
  optim::AdamW faster({p}, {.lr = 3e-3});
  CHECK(faster.options(0).weight_decay == 0.01);
  CHECK(faster.options(0).lr == 3e-3);
}
