// The pointwise losses against PyTorch 1.13 (tests/reference/losses.json, make_losses.py): every
// reduction, beta, delta, weights, pos_weight and log_target, the loss and the gradients of input
// and target in f64; the refusals; autocast's fp32 rule; the modules.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "torch_reference.h"

using namespace kiln;
using Catch::Contains;
using kiln::testing::check_against_torch;
using kiln::testing::doubles;
using kiln::testing::shape_of;
using kiln::testing::torch_reference;
using nlohmann::json;

namespace {

Reduction reduction_of(const std::string& name) {
  if (name == "none") return Reduction::none;
  if (name == "sum") return Reduction::sum;
  if (name == "batchmean") return Reduction::batchmean;
  return Reduction::mean;
}

Tensor loss_of(const json& c, const Tensor& x, const Tensor& y, const Shape& shape) {
  const std::string fn = c.at("loss_fn");
  const Reduction r = reduction_of(c.at("reduction"));
  const json& o = c.at("options");
  const Tensor weight = o.contains("weight") ? tensor(doubles(o.at("weight")), shape) : Tensor();
  if (fn == "l1_loss") return l1_loss(x, y, r);
  if (fn == "smooth_l1_loss") return smooth_l1_loss(x, y, r, o.at("beta"));
  if (fn == "huber_loss") return huber_loss(x, y, r, o.at("delta"));
  if (fn == "binary_cross_entropy") return binary_cross_entropy(x, y, weight, r);
  if (fn == "binary_cross_entropy_with_logits")
    return binary_cross_entropy_with_logits(
        x, y, weight, r, o.contains("pos_weight") ? tensor(doubles(o.at("pos_weight"))) : Tensor());
  return kl_div(x, y, r, o.at("log_target"));
}

}  // namespace

TEST_CASE("pointwise losses equal PyTorch 1.13's: losses and both gradients") {
  const json reference = torch_reference("losses.json");
  const Shape shape = shape_of(reference.at("shape"));
  for (const json& c : reference.at("cases")) {
    INFO(c.at("loss_fn") << " " << c.at("reduction") << " " << c.at("options").dump());
    Tensor x = tensor(doubles(c.at("input")), shape).requires_grad_(true);
    Tensor y = tensor(doubles(c.at("target")), shape).requires_grad_(true);
    const Tensor loss = loss_of(c, x, y, shape);
    const std::vector<double> want = doubles(c.at("loss"));
    REQUIRE(loss.numel() == static_cast<int64_t>(want.size()));
    check_against_torch(loss, want, 1e-13);
    const Tensor grad_output = tensor(doubles(c.at("grad_output")), loss.shape());
    mul(loss, grad_output).sum().backward();
    check_against_torch(x.grad(), doubles(c.at("input_grad")), 1e-12);
    // kl_div's target gradient where the target is 0: PyTorch's xlogy gives 0/0 = NaN there,
    // kiln -input (the where() it computes log with passes nothing to that branch). Compared
    // where PyTorch's is a number.
    std::vector<double> want_target = doubles(c.at("target_grad"));
    Tensor got_target = y.grad().clone();
    for (size_t i = 0; i < want_target.size(); ++i)
      if (std::isnan(want_target[i])) {
        CHECK(c.at("loss_fn") == "kl_div");
        want_target[i] = 0.0;
        got_target.view({-1}).narrow(0, static_cast<int64_t>(i), 1).fill_(0.0);
      }
    check_against_torch(got_target, want_target, 1e-12);
  }
}

TEST_CASE("pointwise losses refuse what PyTorch refuses, naming the op") {
  const Tensor x = full({4}, 0.5), y = full({4}, 1.0);
  CHECK_THROWS_WITH(l1_loss(x, full({2, 2}, 1.0)), Contains("l1_loss") && Contains("same shape"));
  CHECK_THROWS_WITH(binary_cross_entropy(full({4}, 1.5), y),
                    Contains("binary_cross_entropy") && Contains("[0, 1]") && Contains("1.5"));
  CHECK_THROWS_WITH(huber_loss(x, y, Reduction::mean, 0.0), Contains("delta"));
  CHECK_THROWS_WITH(mse_loss(x, y, Reduction::batchmean), Contains("mse_loss"));
  CHECK_THROWS_WITH(l1_loss(x, y, Reduction::batchmean), Contains("kl_div's"));
  {
    autocast scope(DType::bf16);
    CHECK_THROWS_WITH(binary_cross_entropy(x, y), Contains("unsafe to autocast"));
    // fp32 under autocast, as PyTorch's list: a bf16 input gives an f32 loss.
    CHECK(binary_cross_entropy_with_logits(x.to(DType::bf16), y).dtype() == DType::f32);
    CHECK(l1_loss(x.to(DType::bf16), y.to(DType::bf16)).dtype() == DType::f32);
  }
}

TEST_CASE("loss modules carry PyTorch's defaults") {
  const Tensor x = tensor({0.0, 2.0, -3.0}), y = tensor({0.5, 0.0, 0.0});
  CHECK(nn::L1Loss()(x, y).item() == Approx((0.5 + 2.0 + 3.0) / 3));
  CHECK(nn::SmoothL1Loss()(x, y).item() == Approx((0.125 + 1.5 + 2.5) / 3));
  CHECK(nn::HuberLoss(Reduction::sum, 2.0)(x, y).item() == Approx(0.125 + 2.0 + 4.0));
  const Tensor logits = tensor({0.0, 0.0}), labels = tensor({1.0, 0.0});
  CHECK(nn::BCEWithLogitsLoss({.pos_weight = tensor({3.0, 3.0})})(logits, labels).item() ==
        Approx((3.0 + 1.0) * std::log(2.0) / 2));
  CHECK(nn::KLDivLoss(Reduction::batchmean)(log(full({2, 2}, 0.5)), full({2, 2}, 0.5)).item() ==
        Approx(0.0).margin(1e-15));
}
