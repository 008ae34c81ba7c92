// Tensor::index and index_put_ against PyTorch 1.13 (tests/reference/tensor_index.json,
// make_tensor_index.py): integers, slices, None, Ellipsis, bool masks and integer index tensors,
// mixed, with gradients; index_put_ with and without accumulate; the refusals.
#include <catch2/catch.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "torch_reference.h"

using namespace kiln;
using namespace kiln::indexing;
using Catch::Contains;
using kiln::testing::check_against_torch;
using kiln::testing::doubles;
using kiln::testing::ints;
using kiln::testing::shape_of;
using kiln::testing::torch_reference;
using nlohmann::json;

namespace {

std::vector<TensorIndex> parse(const json& entries) {
  std::vector<TensorIndex> out;
  for (const json& e : entries) {
    if (e.contains("int")) {
      out.emplace_back(e.at("int").get<int64_t>());
    } else if (e.contains("slice")) {
      auto bound = [](const json& b) {
        return b.is_null() ? std::optional<int64_t>() : std::optional<int64_t>(b.get<int64_t>());
      };
      const json& s = e.at("slice");
      out.emplace_back(Slice(bound(s[0]), bound(s[1]), bound(s[2])));
    } else if (e.contains("none")) {
      out.emplace_back(None);
    } else if (e.contains("ellipsis")) {
      out.emplace_back(Ellipsis);
    } else if (e.contains("mask")) {
      out.emplace_back(tensor(ints(e.at("mask").at("values")), shape_of(e.at("mask").at("shape")))
                           .to(DType::boolean));
    } else {
      out.emplace_back(
          tensor(ints(e.at("index").at("values")), shape_of(e.at("index").at("shape"))));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("Tensor::index equals PyTorch 1.13's x[...]: values and gradients") {
  const json reference = torch_reference("tensor_index.json");
  const Shape shape = shape_of(reference.at("shape"));
  for (const json& c : reference.at("cases")) {
    const std::vector<TensorIndex> indices = parse(c.at("index"));
    std::string spelled;
    for (const TensorIndex& i : indices) spelled += i.str() + " ";
    INFO("x[" << spelled << "]");
    Tensor x = tensor(doubles(c.at("x")), shape).requires_grad_();
    Tensor out = x.index(indices);
    REQUIRE(out.shape() == shape_of(c.at("shape")));
    check_against_torch(out, doubles(c.at("output")), 0.0);
    (out * tensor(doubles(c.at("grad_output")), out.shape())).sum().backward();
    check_against_torch(x.grad(), doubles(c.at("grad")), 1e-15);
  }
}

TEST_CASE("Tensor::index_put_ equals PyTorch 1.13's") {
  const json reference = torch_reference("tensor_index.json");
  const Shape shape = shape_of(reference.at("shape"));
  for (const json& c : reference.at("puts")) {
    const std::vector<TensorIndex> indices = parse(c.at("index"));
    Tensor x = tensor(doubles(c.at("x")), shape);
    Tensor v = tensor(doubles(c.at("values")), shape_of(c.at("values_shape")));
    Tensor& same = x.index_put_(indices, v, c.at("accumulate").get<bool>());
    CHECK(same.is_same(x));
    check_against_torch(x, doubles(c.at("output")), 0.0);
  }
}

TEST_CASE("Tensor::index: views where Python's gives views, gradients through index_put_") {
  Tensor x = arange(12, DType::i64).view({3, 4}).to(DType::f32);
  Tensor row = x.index({1, Slice(None, None, 2)});
  row.fill_(-1.0);  // a view: writes into x, as t[1, ::2] = -1 would
  CHECK(x.index({1}).tolist() == std::vector<double>{-1, 5, -1, 7});
  x.index_put_({Slice(), 0}, 100.0);
  CHECK(x.index({Slice(), 0}).tolist() == std::vector<double>{100, 100, 100});
  x.index_put_({gt(x, 50.0)}, 0.0);  // masked assignment, t[t > 50] = 0
  CHECK(x.sum().item() == Approx(1 + 2 + 3 + 5 - 1 + 7 + 9 + 10 + 11));

  // Gradients reach both the tensor (where not overwritten) and the values.
  Tensor base = tensor({1.0, 2.0, 3.0, 4.0}).requires_grad_();
  Tensor values = tensor({10.0, 20.0}).requires_grad_();
  Tensor y = base * 1.0;
  y.index_put_({tensor({0, 2})}, values);
  (y * tensor({1.0, 2.0, 3.0, 4.0})).sum().backward();
  CHECK(base.grad().tolist() == std::vector<double>{0, 2, 0, 4});
  CHECK(values.grad().tolist() == std::vector<double>{1, 3});
}

TEST_CASE("Tensor::index and index_put_ refuse what they cannot do, naming it") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH(x.index({0, 1, 2}),
                    Contains("index: too many indices") && Contains("dimension 2"));
  CHECK_THROWS_WITH(x.index({5}), Contains("index 5 is out of bounds for a dim of size 2"));
  CHECK_THROWS_WITH(x.index({tensor({0, 3}) + 0, Slice()}),
                    Contains("out of bounds for a dim of size 2"));
  CHECK_THROWS_WITH(x.index({Ellipsis, Ellipsis}), Contains("at most one Ellipsis"));
  CHECK_THROWS_WITH(x.index({Slice(None, None, -1)}), Contains("slice step must be positive"));
  CHECK_THROWS_WITH(x.index({ones({3}, DType::boolean)}), Contains("bool mask of shape [3]"));
  CHECK_THROWS_AS(x.index({tensor({0.5f})}), DTypeError);
  CHECK_THROWS_WITH(x.index_put_({tensor({0, 0})}, 1.0),
                    Contains("distinct") && Contains("accumulate"));
  CHECK_THROWS_WITH(x.index_put_({0}, ones({2})),
                    Contains("do not broadcast to the indexed shape [3]"));
  Tensor leaf = zeros({2}).requires_grad_();
  CHECK_THROWS_AS(leaf.index_put_({0}, 1.0), AutogradError);
}
