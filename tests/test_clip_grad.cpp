// clip_grad_norm_ and clip_grad_value_ (optim/clip_grad.h): hand-computed norms and PyTorch's
// clamp (tests/reference/optimizers.json, make_optimizers.py).
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/optim/clip_grad.h"
#include "reference_loops.h"
#include "torch_reference.h"

using namespace kiln;
using namespace kiln::optim;
using Catch::Contains;
using kiln::testing::check_against_torch;
using kiln::testing::doubles;
using kiln::testing::param;
using kiln::testing::torch_reference;
using nlohmann::json;

TEST_CASE("clip_grad: clip_grad_norm_ scales by max_norm / (total + 1e-6)") {
  // Gradients [3, 4] and [12] have a joint 2-norm of sqrt(9 + 16 + 144) = 13; c has no gradient.
  Tensor a = param({0.0, 0.0}), b = param({0.0}), c = param({0.0});
  a.set_grad(tensor({3.0, 4.0}));
  b.set_grad(tensor({12.0}));
  const double total = clip_grad_norm_({a, b, c}, 6.5);
  CHECK(total == Approx(13.0).epsilon(1e-15));
  const double coef = 6.5 / (13.0 + 1e-6);
  CHECK(a.grad().tolist()[0] == Approx(3.0 * coef).epsilon(1e-15));
  CHECK(a.grad().tolist()[1] == Approx(4.0 * coef).epsilon(1e-15));
  CHECK(b.grad().item<double>() == Approx(12.0 * coef).epsilon(1e-15));
  CHECK_FALSE(c.grad().defined());
}

TEST_CASE("clip_grad: clip_grad_norm_ leaves gradients under max_norm untouched") {
  Tensor a = param({0.0, 0.0}), b = param({0.0});
  a.set_grad(tensor({3.0, 4.0}));
  b.set_grad(tensor({12.0}));
  CHECK(clip_grad_norm_({a, b}, 14.0) == Approx(13.0).epsilon(1e-15));
  CHECK(a.grad().tolist() == std::vector<double>{3.0, 4.0});
  CHECK(b.grad().item<double>() == 12.0);
}

TEST_CASE("clip_grad: clip_grad_norm_ with the inf-norm and the 1-norm") {
  // inf-norm: max |g| = 12; 1-norm: 3 + 4 + 12 = 19.
  Tensor a = param({0.0, 0.0}), b = param({0.0});
  a.set_grad(tensor({-3.0, 4.0}));
  b.set_grad(tensor({-12.0}));
  CHECK(clip_grad_norm_({a, b}, 100.0, 1.0) == Approx(19.0).epsilon(1e-15));
  const double total = clip_grad_norm_({a, b}, 6.0, INFINITY);
  CHECK(total == Approx(12.0).epsilon(1e-15));
  const double coef = 6.0 / (12.0 + 1e-6);
  CHECK(a.grad().tolist()[0] == Approx(-3.0 * coef).epsilon(1e-15));
  CHECK(b.grad().item<double>() == Approx(-12.0 * coef).epsilon(1e-15));
}

TEST_CASE("clip_grad: clip_grad_norm_ on f32 gradients, no gradients and bad arguments") {
  Tensor a = tensor({0.0f, 0.0f});
  a.requires_grad_();
  a.set_grad(tensor({6.0f, 8.0f}));
  CHECK(clip_grad_norm_({a}, 5.0) == Approx(10.0).epsilon(1e-12));
  CHECK(a.grad().dtype() == DType::f32);
  CHECK(a.grad().tolist()[0] == Approx(3.0).epsilon(1e-6));
  CHECK(a.grad().tolist()[1] == Approx(4.0).epsilon(1e-6));

  Tensor b = param({1.0});
  CHECK(clip_grad_norm_({b}, 1.0) == 0.0);
  Tensor empty_param = param({});
  empty_param.set_grad(zeros({0}, DType::f64));
  CHECK(clip_grad_norm_({empty_param}, 1.0, INFINITY) == 0.0);

  CHECK_THROWS_AS(clip_grad_norm_({b}, -1.0), ValueError);
  CHECK_THROWS_WITH(clip_grad_norm_({b}, -1.0), Catch::Contains("clip_grad_norm_"));
  CHECK_THROWS_AS(clip_grad_norm_({b}, 1.0, 0.0), ValueError);
}

TEST_CASE("clip_grad: clip_grad_value_ clamps as PyTorch's") {
  const json c = torch_reference("optimizers.json").at("clip_value");
  Tensor p = zeros({5}, DType::f64).requires_grad_(true);
  p.set_grad(tensor(doubles(c.at("grad"))));
  clip_grad_value_({p}, 0.4);
  check_against_torch(p.grad(), doubles(c.at("clipped")), 0.0);
  CHECK_THROWS_WITH(clip_grad_value_({p}, -1.0), Contains("clip_value"));
}
