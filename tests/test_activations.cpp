// ELU, Softplus, Hardswish, PReLU and LeakyReLU modules against PyTorch 1.13
// (tests/reference/activations.json, make_activations.py): outputs and gradients in f64; the
// Softmax and LogSoftmax modules; PReLU's state dict and refusals.
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
using kiln::testing::shape_of;
using kiln::testing::torch_reference;
using nlohmann::json;

namespace {

std::shared_ptr<nn::Module> module_for(const json& c) {
  const std::string name = c.at("module");
  const json& o = c.at("options");
  if (name == "ELU") return std::make_shared<nn::ELU>(o.value("alpha", 1.0));
  if (name == "Softplus")
    return std::make_shared<nn::Softplus>(o.value("beta", 1.0), o.value("threshold", 20.0));
  if (name == "Hardswish") return std::make_shared<nn::Hardswish>();
  if (name == "LeakyReLU") return std::make_shared<nn::LeakyReLU>(o.at("negative_slope"));
  auto prelu = std::make_shared<nn::PReLU>(o.at("num_parameters"));
  prelu->to(DType::f64);
  prelu->load_state_dict({{"weight", tensor(doubles(c.at("weight")))}});
  return prelu;
}

}  // namespace

TEST_CASE("activation modules equal PyTorch 1.13's: outputs and gradients") {
  const json reference = torch_reference("activations.json");
  const Shape shape = shape_of(reference.at("shape"));
  for (const json& c : reference.at("cases")) {
    INFO(c.at("module") << " " << c.at("options").dump());
    auto module = module_for(c);
    Tensor x = tensor(doubles(c.at("input")), shape).requires_grad_(true);
    const Tensor out = module->forward(x);
    check_against_torch(out, doubles(c.at("output")), 1e-14);
    mul(out, tensor(doubles(c.at("grad_output")), shape)).sum().backward();
    check_against_torch(x.grad(), doubles(c.at("input_grad")), 1e-14);
    if (c.contains("weight_grad"))
      check_against_torch(module->named_parameters()[0].second.grad(), doubles(c.at("weight_grad")),
                          1e-13);
  }
}

TEST_CASE("Softmax and LogSoftmax modules; PReLU's names and refusals") {
  const Tensor x = randn({3, 4});
  CHECK(equal(nn::Softmax(1).forward(x), softmax(x, 1)));
  CHECK(equal(nn::LogSoftmax(-1).forward(x), log_softmax(x, -1)));
  nn::PReLU prelu(4);
  CHECK(prelu.state_dict().count("weight") == 1);
  CHECK(prelu.str().find("num_parameters=4") != std::string::npos);
  CHECK_THROWS_WITH(prelu.forward(randn({2, 3, 5})),
                    Contains("prelu") && Contains("one per channel"));
  CHECK_THROWS_WITH(softplus(x, 0.0), Contains("softplus: beta"));
  // Softplus far below zero stays positive and finite.
  CHECK(softplus(full({1}, -30.0)).item() > 0.0);
}
