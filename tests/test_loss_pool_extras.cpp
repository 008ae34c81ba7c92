// cosine_embedding_loss and adaptive_max_pool2d against PyTorch 1.13 (tests/reference/
// loss_pool_extras.json, make_loss_pool_extras.py); Dropout2d's channel masks; ModuleDict and
// ParameterList.
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "torch_reference.h"

using namespace kiln;
using Catch::Contains;
using kiln::testing::check_against_torch;
using kiln::testing::doubles;
using kiln::testing::ints;
using kiln::testing::shape_of;
using kiln::testing::torch_reference;
using nlohmann::json;

TEST_CASE("cosine_embedding_loss equals PyTorch 1.13's in three reductions, with gradients") {
  const json r = torch_reference("loss_pool_extras.json");
  const Tensor target = tensor(ints(r.at("target")), {5});
  for (const char* name : {"cosine_mean", "cosine_none", "cosine_sum"}) {
    INFO(name);
    const json& c = r.at("cases").at(name);
    Tensor x1 = tensor(doubles(r.at("x1")), {5, 4}).requires_grad_(true);
    Tensor x2 = tensor(doubles(r.at("x2")), {5, 4}).requires_grad_(true);
    const std::string reduction = c.at("reduction");
    const Reduction red = reduction == "mean"  ? Reduction::mean
                          : reduction == "sum" ? Reduction::sum
                                               : Reduction::none;
    const Tensor out = nn::CosineEmbeddingLoss(c.at("margin"), red)(x1, x2, target);
    check_against_torch(out, doubles(c.at("output")), 1e-14);
    mul(out, tensor(doubles(c.at("grad_output")), out.shape())).sum().backward();
    check_against_torch(x1.grad(), doubles(c.at("x1_grad")), 1e-13);
    check_against_torch(x2.grad(), doubles(c.at("x2_grad")), 1e-13);
  }
  CHECK_THROWS_WITH(cosine_embedding_loss(randn({5, 4}), randn({5, 4}), tensor({1, -1})),
                    Contains("cosine_embedding_loss: expected a target of shape [5]"));
}

TEST_CASE("adaptive_max_pool2d equals PyTorch 1.13's, tiling or overlapping, ties included") {
  const json r = torch_reference("loss_pool_extras.json");
  for (const auto& [name, c] : r.at("cases").items()) {
    if (name.rfind("amp_", 0) != 0) continue;
    INFO(name);
    Tensor x = tensor(doubles(r.at("x")), {2, 3, 7, 5}).requires_grad_(true);
    const Shape shape = shape_of(c.at("shape"));
    const Tensor out = nn::AdaptiveMaxPool2d({shape[2], shape[3]}).forward(x);
    REQUIRE(out.shape() == shape);
    check_against_torch(out, doubles(c.at("output")), 0.0);
    mul(out, tensor(doubles(c.at("grad_output")), out.shape())).sum().backward();
    check_against_torch(x.grad(), doubles(c.at("input_grad")), 0.0);
  }
  CHECK_THROWS_WITH(adaptive_max_pool2d(randn({3, 4, 5}), 2),
                    Contains("adaptive_max_pool2d: expected an input [N, C, H, W]"));
}

TEST_CASE("Dropout2d zeroes whole channels and scales the rest; identity in eval") {
  manual_seed(3);
  nn::Dropout2d drop(0.5);
  const Tensor x = ones({8, 16, 3, 4});
  const Tensor y = drop.forward(x);
  const Tensor per_channel = amax(y, {2, 3});
  CHECK(equal(amin(y, {2, 3}), per_channel));  // constant over each plane
  CHECK(all(logical_or(eq(per_channel, 0.0), eq(per_channel, 2.0))).item<bool>());
  const double kept = mean(ne(per_channel, 0.0).to(DType::f64)).item<double>();
  CHECK(kept > 0.3);
  CHECK(kept < 0.7);
  drop.eval();
  CHECK(equal(drop.forward(x), x));
  CHECK_THROWS_WITH(dropout2d(ones({2, 3})), Contains("dropout2d: expected an input"));
}

TEST_CASE("ModuleDict and ParameterList name their entries as PyTorch's") {
  nn::ModuleDict heads({{"cls", std::make_shared<nn::Linear>(4, 3)}});
  heads.insert("box", std::make_shared<nn::Linear>(4, 2));
  CHECK(heads.keys() == std::vector<std::string>{"cls", "box"});
  CHECK(heads.contains("box"));
  CHECK(heads.state_dict().count("box.weight") == 1);
  CHECK(heads["cls"]->forward(randn({2, 4})).shape() == Shape{2, 3});
  CHECK_THROWS_WITH(heads["mask"], Contains("ModuleDict: no module named 'mask'"));
  CHECK_THROWS_WITH(heads.insert("cls", std::make_shared<nn::ReLU>()), Contains("already"));

  nn::ParameterList scales({ones({3})});
  const Tensor second = scales.append(zeros({2}));
  CHECK(scales.size() == 2);
  CHECK(second.requires_grad());
  CHECK(scales.state_dict().count("1") == 1);
  CHECK(scales[1].is_same(second));
  CHECK_THROWS_AS(scales[2], IndexError);
}
