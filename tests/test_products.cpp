// cumprod and prod against PyTorch 1.13 (tests/reference/products.json, make_products.py): outputs
// and gradients over lines holding no, one and two zeros; integers; empty products.
#include <catch2/catch.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "torch_reference.h"

using namespace kiln;
using kiln::testing::check_against_torch;
using kiln::testing::doubles;
using kiln::testing::ints;
using kiln::testing::shape_of;
using kiln::testing::torch_reference;
using nlohmann::json;

namespace {

Tensor run_op(const json& c, const Tensor& x) {
  const json& a = c.at("args");
  if (c.at("op") == "cumprod") return cumprod(x, a.at("dim"));
  const std::vector<int64_t> dims = ints(a.at("dims"));
  // The reference's whole-tensor product is of columns 1 and 2 only (two zeros among them).
  if (dims.empty()) return prod(x.slice(2, 1, 3));
  return prod(x, dims, a.at("keepdim"));
}

}  // namespace

TEST_CASE("cumprod and prod equal PyTorch 1.13's, gradients exact around zeros") {
  const json reference = torch_reference("products.json");
  const Shape shape = shape_of(reference.at("shape"));
  for (const json& c : reference.at("cases")) {
    INFO(c.at("op") << " " << c.at("args").dump());
    Tensor x = tensor(doubles(reference.at("input")), shape).requires_grad_(true);
    const Tensor out = run_op(c, x);
    REQUIRE(out.shape() == shape_of(c.at("shape")));
    check_against_torch(out, doubles(c.at("output")), 1e-15);
    mul(out, tensor(doubles(c.at("grad_output")), out.shape())).sum().backward();
    check_against_torch(x.grad(), doubles(c.at("input_grad")), 1e-14);
  }
}

TEST_CASE("prod and cumprod of integers widen to i64; empty products are 1") {
  const json i = torch_reference("products.json").at("integers");
  const Tensor x = tensor(ints(i.at("input")), {2, 3}).to(DType::i32);
  CHECK(prod(x, {1}).dtype() == DType::i64);
  CHECK(equal(prod(x, {1}), tensor(ints(i.at("prod_1")), {2})));
  CHECK(equal(cumprod(x, 1), tensor(ints(i.at("cumprod_1")), {2, 3})));
  CHECK(prod(zeros({2, 0})).item<double>() == 1.0);
  CHECK(equal(prod(zeros({2, 0}), {1}), ones({2})));
  CHECK(prod(full({}, 3.0)).item<double>() == 3.0);
  Tensor f = randn({3, 4}).to(DType::f16);
  {
    autocast amp(DType::f16);
    CHECK(prod(f, {1}).dtype() == DType::f32);  // PyTorch's autocast runs prod in f32
  }
}
