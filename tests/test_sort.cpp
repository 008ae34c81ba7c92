// sort, argsort, topk and the rounding ops against PyTorch 1.13 (tests/reference/sort.json,
// make_sort.py): values, indices and gradients over tied rows, NaN and signed zeros, halves; the
// refusals.
#include <catch2/catch.hpp>
#include <cmath>
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

ValuesIndices run_op(const json& c, const Tensor& x) {
  const json& a = c.at("args");
  if (c.at("op") == "sort") return sort(x, a.at("dim"), a.at("descending"));
  return topk(x, a.at("k"), a.at("dim"), a.at("largest"));
}

std::vector<int64_t> as_ints(const Tensor& t) {
  const Tensor c = t.cpu().contiguous();
  return {c.data<int64_t>(), c.data<int64_t>() + c.numel()};
}

}  // namespace

TEST_CASE("sort and topk equal PyTorch 1.13's stable sort: values, indices, gradients") {
  const json reference = torch_reference("sort.json");
  const Shape shape = shape_of(reference.at("shape"));
  for (const json& c : reference.at("cases")) {
    INFO(c.at("op") << " " << c.at("args").dump());
    Tensor x = tensor(doubles(reference.at("input")), shape).requires_grad_(true);
    const ValuesIndices out = run_op(c, x);
    REQUIRE(out.values.shape() == shape_of(c.at("shape")));
    REQUIRE(out.indices.dtype() == DType::i64);
    CHECK(as_ints(out.indices) == ints(c.at("indices")));
    check_against_torch(out.values, doubles(c.at("values")), 0.0);
    mul(out.values, tensor(doubles(c.at("grad_output")), out.values.shape())).sum().backward();
    check_against_torch(x.grad(), doubles(c.at("input_grad")), 0.0);
  }
}

TEST_CASE("sort places NaN above every number, keeps -0.0 and 0.0 in order, sorts every dtype") {
  const json s = torch_reference("sort.json").at("special");
  const std::vector<double> values = doubles(s.at("input"));
  const int64_t n = static_cast<int64_t>(values.size());
  for (DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    const Tensor x = tensor(values, {n}).to(dtype);
    CHECK(as_ints(argsort(x)) == ints(s.at("ascending")));
    CHECK(as_ints(sort(x, 0, true).indices) == ints(s.at("descending")));
  }
  const Tensor integers = tensor(std::vector<int64_t>{4, -1, 4, 0, 7, -1}, {6});
  CHECK(as_ints(argsort(integers)) == ints(s.at("argsort_int")));
  CHECK(equal(sort(integers).values, tensor(std::vector<int64_t>{-1, -1, 0, 4, 4, 7}, {6})));
  const Tensor flags = ne(tensor(std::vector<int64_t>{1, 0, 1, 0}, {4}), 0.0);
  CHECK(as_ints(argsort(flags, 0, true)) == std::vector<int64_t>{0, 2, 1, 3});
}

TEST_CASE("sort and topk on scalars, empty dims and strided inputs; bad k is refused") {
  const Tensor scalar = full({}, 2.5);
  CHECK(sort(scalar).values.item<double>() == 2.5);
  CHECK(sort(scalar).indices.item<int64_t>() == 0);
  CHECK(topk(scalar, 1).values.item<double>() == 2.5);
  const Tensor empty_rows = zeros({3, 0});
  CHECK(sort(empty_rows, 1).values.shape() == Shape{3, 0});
  CHECK(topk(empty_rows, 0, 1).indices.shape() == Shape{3, 0});
  CHECK(topk(randn({4, 6}), 0).values.shape() == Shape{4, 0});

  const Tensor x = randn({4, 6, 5});
  const Tensor strided = x.transpose(0, 2);
  const ValuesIndices r = sort(strided, 1, true);
  CHECK(equal(r.values, sort(strided.contiguous(), 1, true).values));
  CHECK(equal(gather(strided, 1, r.indices), r.values));

  CHECK_THROWS_WITH(topk(x, 7, 1), Contains("topk: k must be in [0, 6]") && Contains("got 7"));
  CHECK_THROWS_AS(topk(x, -1), ValueError);
  CHECK_THROWS_AS(sort(x, 3), IndexError);
}

TEST_CASE("floor, ceil, round (halves to even) and trunc equal PyTorch's; gradients are zero") {
  const json r = torch_reference("sort.json").at("rounding");
  const std::vector<double> input = doubles(r.at("input"));
  const int64_t n = static_cast<int64_t>(input.size());
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tensor x = tensor(input, {n}).to(DType::f32).to(dtype);
    for (const char* op : {"floor", "ceil", "round", "trunc"}) {
      INFO(op);
      const std::string name = op;
      const Tensor y = name == "floor"   ? floor(x)
                       : name == "ceil"  ? ceil(x)
                       : name == "round" ? round(x)
                                         : trunc(x);
      const std::vector<double> expected = doubles(r.at(op));
      check_against_torch(y, expected, 0.0);
      const Tensor c = y.to(DType::f64).contiguous();
      for (int64_t i = 0; i < n; ++i)  // -0.0 stays -0.0, as torch's
        CHECK(std::signbit(c.data<double>()[i]) == std::signbit(expected[i]));
    }
  }
  const Tensor halves = tensor(std::vector<double>{0.5, 1.5, 2.5}, {3}).to(DType::f16);
  CHECK(equal(round(halves), tensor(std::vector<double>{0.0, 2.0, 2.0}, {3}).to(DType::f16)));
  const Tensor integers = tensor(std::vector<int64_t>{-3, 0, 5}, {3});
  CHECK(equal(floor(integers), integers));
  CHECK(round(integers).dtype() == DType::i64);

  Tensor x = randn({3, 4}).requires_grad_(true);
  add(add(floor(x), ceil(x)), add(round(x), trunc(x))).sum().backward();
  CHECK(equal(x.grad(), zeros({3, 4})));
  CHECK_THROWS_WITH(floor(gt(x.detach(), 0.0)), Contains("floor") && Contains("bool"));
}
