// einsum against PyTorch 1.13 (tests/reference/einsum.json, make_einsum.py): outputs and every
// operand's gradient for explicit and implicit outputs, ellipses, broadcasting, three operands;
// the refusals.
#include <catch2/catch.hpp>
#include <cstddef>
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

TEST_CASE("einsum equals PyTorch 1.13's: outputs and gradients") {
  const json reference = torch_reference("einsum.json");
  for (const json& c : reference.at("cases")) {
    const std::string equation = c.at("equation");
    INFO(equation);
    std::vector<Tensor> operands;
    for (size_t i = 0; i < c.at("shapes").size(); ++i)
      operands.push_back(
          tensor(doubles(c.at("inputs")[i]), shape_of(c.at("shapes")[i])).requires_grad_(true));
    const Tensor out = einsum(equation, operands);
    REQUIRE(out.shape() == shape_of(c.at("shape")));
    check_against_torch(out, doubles(c.at("output")), 1e-14);
    mul(out, tensor(doubles(c.at("grad_output")), out.shape())).sum().backward();
    for (size_t i = 0; i < operands.size(); ++i)
      check_against_torch(operands[i].grad(), doubles(c.at("grads")[i]), 1e-14);
  }
}

TEST_CASE("einsum: autocast, bad equations") {
  const Tensor a = randn({3, 4}), b = randn({4, 5});
  {
    autocast amp(DType::bf16);
    CHECK(einsum("ij,jk->ik", {a, b}).dtype() == DType::bf16);  // through bmm
  }
  CHECK_THROWS_WITH(einsum("ij,jk->ik", {a}), Contains("2 operands in the equation, 1 given"));
  CHECK_THROWS_WITH(einsum("ij,jk->il", {a, b}), Contains("appears in no operand"));
  CHECK_THROWS_WITH(einsum("ij,kk->ik", {a, randn({5, 4})}),
                    Contains("operand 1 repeats a subscript over dims of sizes 5 and 4"));
  CHECK_THROWS_WITH(einsum("ij,jk->ik", {a, randn({5, 5})}),
                    Contains("size 4 in one operand and 5 in another"));
  CHECK_THROWS_WITH(einsum("i1,jk->ik", {a, b}), Contains("subscripts are letters"));
  CHECK_THROWS_WITH(einsum("ijk,jk->ik", {a, b}), Contains("operand 0 has 2 dims for 3"));
  CHECK_THROWS_AS(einsum("ij,jk->ik", {a, b.to(DType::f64)}), DTypeError);
}
