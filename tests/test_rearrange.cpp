// flip, roll, repeat, tile, tril, triu, all and any against PyTorch 1.13
// (tests/reference/rearrange.json, make_rearrange.py): outputs and gradients; the refusals.
#include <catch2/catch.hpp>
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
using kiln::testing::ints;
using kiln::testing::shape_of;
using kiln::testing::torch_reference;
using nlohmann::json;

namespace {

Tensor run_op(const json& c, const Tensor& x) {
  const std::string op = c.at("op");
  const json& a = c.at("args");
  if (op == "flip") return flip(x, ints(a.at("dims")));
  if (op == "roll") return roll(x, ints(a.at("shifts")), ints(a.at("dims")));
  if (op == "repeat") return repeat(x, ints(a.at("repeats")));
  if (op == "tile") return tile(x, ints(a.at("repeats")));
  if (op == "tril") return tril(x, a.at("diagonal"));
  return triu(x, a.at("diagonal"));
}

Tensor as_bool(const std::vector<int64_t>& values, const Shape& shape) {
  return ne(tensor(values, shape), 0.0);
}

}  // namespace

TEST_CASE("rearranging ops equal PyTorch 1.13's: outputs and gradients") {
  const json reference = torch_reference("rearrange.json");
  const Shape shape = shape_of(reference.at("shape"));
  for (const json& c : reference.at("cases")) {
    INFO(c.at("op") << " " << c.at("args").dump());
    Tensor x = tensor(doubles(reference.at("input")), shape).requires_grad_(true);
    const Tensor out = run_op(c, x);
    REQUIRE(out.shape() == shape_of(c.at("shape")));
    check_against_torch(out, doubles(c.at("output")), 0.0);
    mul(out, tensor(doubles(c.at("grad_output")), out.shape())).sum().backward();
    check_against_torch(x.grad(), doubles(c.at("input_grad")), 1e-14);  // sums in another order
  }
}

TEST_CASE("all and any equal PyTorch's; the rearranging ops refuse bad arguments") {
  const json l = torch_reference("rearrange.json").at("logical");
  const Tensor b = as_bool(ints(l.at("input")), {2, 3, 4});
  CHECK(equal(all(b, {1}), as_bool(ints(l.at("all_1")), {2, 4})));
  CHECK(equal(any(b, {2}, true), as_bool(ints(l.at("any_2_keep")), {2, 3, 1})));
  CHECK(all(b).item<bool>() == l.at("all").get<bool>());
  CHECK(any(b).item<bool>() == l.at("any").get<bool>());
  CHECK(any(zeros({0})).item<bool>() == false);
  CHECK(all(zeros({0})).item<bool>() == true);

  const Tensor x = randn({3, 4});
  CHECK_THROWS_WITH(flip(x, {0, -2}), Contains("flip") && Contains("more than once"));
  CHECK_THROWS_WITH(roll(x, {1, 2}, {0}), Contains("roll: expected one shift per dim"));
  CHECK_THROWS_WITH(repeat(x, {2}), Contains("repeat") && Contains("at least as many"));
  CHECK_THROWS_WITH(tril(randn({4})), Contains("tril") && Contains("2 or more dims"));
  CHECK_THROWS_AS(flip(x, {2}), IndexError);
}
