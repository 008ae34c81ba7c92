// Joining and splitting: cat, stack, split, chunk.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "reference_loops.h"

using namespace kiln;
using kiln::testing::gradcheck;
using kiln::testing::index_of;
using kiln::testing::non_contiguous;
using kiln::testing::offset_of;
using kiln::testing::random_f64;

namespace {

// cat by walking the output and asking which input each element comes from.
std::vector<double> cat_reference(const std::vector<Tensor>& inputs, int64_t dim,
                                  const Shape& out_shape) {
  std::vector<std::vector<double>> values;
  for (const Tensor& t : inputs) values.push_back(t.tolist());
  std::vector<double> out(shape_numel(out_shape));
  for (int64_t o = 0; o < static_cast<int64_t>(out.size()); ++o) {
    Shape index = index_of(out_shape, o);
    size_t which = 0;
    while (index[dim] >= inputs[which].size(dim)) index[dim] -= inputs[which++].size(dim);
    out[o] = values[which][offset_of(inputs[which].shape(), index)];
  }
  return out;
}

Tensor random_of(const Shape& shape, DType dtype, uint64_t seed) {
  if (is_floating(dtype)) return random_f64(shape, seed, -2.0, 2.0).to(dtype);
  Generator gen(seed);
  return randint(0, dtype == DType::boolean ? 2 : 50, shape, DType::i64, Device::cpu(), &gen)
      .to(dtype);
}

std::vector<int64_t> sizes_along(const std::vector<Tensor>& pieces, int64_t dim) {
  std::vector<int64_t> sizes;
  for (const Tensor& p : pieces) sizes.push_back(p.size(dim));
  return sizes;
}

}  // namespace

TEST_CASE("index: cat matches a loop reference along every dim, f32 and f64") {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (int64_t dim = 0; dim < 3; ++dim) {
      Shape sa = {2, 3, 4}, sb = sa, sc = sa;
      sb[dim] = 1;
      sc[dim] = 5;
      std::vector<Tensor> inputs = {random_of(sa, dtype, 1), random_of(sb, dtype, 2),
                                    random_of(sc, dtype, 3)};
      Tensor out = cat(inputs, dim - 3);  // negative dims count from the end
      Shape expected = sa;
      expected[dim] = sa[dim] + 1 + 5;
      REQUIRE(out.shape() == expected);
      CHECK(out.dtype() == dtype);
      CHECK(out.tolist() == cat_reference(inputs, dim, expected));
    }
  }
}

TEST_CASE("index: cat of non-contiguous inputs") {
  Tensor a = random_f64({4, 3}, 4).t();                // transposed [3, 4]
  Tensor b = random_f64({3, 8}, 5).slice(1, 0, 8, 2);  // every other column [3, 4]
  Tensor c = random_f64({1, 4}, 6).expand({2, 4});     // stride-0 rows
  Tensor d = non_contiguous(random_f64({3, 4}, 7));
  for (int64_t dim : {0, 1}) {
    std::vector<Tensor> inputs =
        dim == 0 ? std::vector<Tensor>{a, b, c, d} : std::vector<Tensor>{a, b, d};
    Tensor out = cat(inputs, dim);
    CHECK(out.is_contiguous());
    CHECK(out.tolist() == cat_reference(inputs, dim, out.shape()));
  }
}

TEST_CASE("index: cat of integer, bool and 16-bit dtypes") {
  for (DType dtype : {DType::i32, DType::i64, DType::u8, DType::boolean, DType::f16, DType::bf16}) {
    std::vector<Tensor> inputs = {random_of({2, 3}, dtype, 8), random_of({2, 2}, dtype, 9)};
    Tensor out = cat(inputs, 1);
    CHECK(out.dtype() == dtype);
    CHECK(out.tolist() == cat_reference(inputs, 1, {2, 5}));
  }
}

TEST_CASE("index: cat promotes dtypes like PyTorch") {
  struct Case {
    DType a, b, out;
  };
  for (Case c :
       {Case{DType::i32, DType::f32, DType::f32}, Case{DType::i64, DType::f64, DType::f64},
        Case{DType::boolean, DType::u8, DType::u8}, Case{DType::i32, DType::i64, DType::i64},
        Case{DType::f16, DType::bf16, DType::f32}, Case{DType::f32, DType::f64, DType::f64}}) {
    std::vector<Tensor> inputs = {random_of({2, 2}, c.a, 10), random_of({1, 2}, c.b, 11)};
    Tensor out = cat(inputs, 0);
    CHECK(out.dtype() == c.out);
    CHECK(out.tolist() == cat_reference(inputs, 0, {3, 2}));
  }
}

TEST_CASE("index: cat of zero-size inputs and legacy 1-D empty tensors") {
  Tensor a = random_f64({2, 3}, 12);
  Tensor none = zeros({2, 0}, DType::f64);
  Tensor out = cat({none, a, none}, 1);
  CHECK(out.shape() == Shape{2, 3});
  CHECK(out.tolist() == a.tolist());

  // A [0] tensor is skipped next to 2-D inputs, whatever their shape, as PyTorch does.
  Tensor legacy = zeros({0}, DType::f64);
  Tensor skipped = cat({legacy, a, legacy}, 1);
  CHECK(skipped.shape() == Shape{2, 3});
  CHECK(skipped.tolist() == a.tolist());
  CHECK(cat({legacy, legacy}, 0).shape() == Shape{0});
  CHECK(cat({zeros({0, 3}), zeros({0, 3})}, 0).shape() == Shape{0, 3});
}

TEST_CASE("index: cat gradcheck") {
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return cat({in[0], in[1], in[2]}, 1);
      },
      {random_f64({2, 3}, 13), random_f64({2, 1}, 14), random_f64({2, 2}, 15)});
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return cat({in[0], in[0].t()}, 0);
      },
      {random_f64({3, 3}, 16)});
}

TEST_CASE("index: cat backward gives each input its dtype and skips inputs without grad") {
  Tensor a = random_f64({2, 2}, 17).to(DType::f32).requires_grad_();
  Tensor b = random_f64({1, 2}, 18).requires_grad_();
  Tensor c = random_f64({3, 2}, 19);
  Tensor legacy = zeros({0}, DType::f64).requires_grad_();
  Tensor out = cat({a, b, c, legacy}, 0);
  CHECK(out.dtype() == DType::f64);
  REQUIRE(out.grad_fn() != nullptr);
  CHECK(out.grad_fn()->name() == "CatBackward");
  Tensor g = arange(0.0, 12.0, 1.0, DType::f64).reshape({6, 2});
  out.backward(g);
  CHECK(a.grad().dtype() == DType::f32);
  CHECK(a.grad().tolist() == std::vector<double>{0, 1, 2, 3});
  CHECK(b.grad().tolist() == std::vector<double>{4, 5});
  CHECK_FALSE(c.grad().defined());
  CHECK(legacy.grad().shape() == Shape{0});
}

TEST_CASE("index: cat errors name the input and the dims") {
  CHECK_THROWS_AS(cat({}, 0), ValueError);
  CHECK_THROWS_WITH(cat({}, 0), Catch::Contains("cat") && Catch::Contains("non-empty"));

  Tensor a = zeros({2, 3}), b = zeros({3, 3}), c = zeros({2, 3, 1});
  CHECK_THROWS_AS(cat({a, a, b}, 1), ShapeError);
  CHECK_THROWS_WITH(cat({a, a, b}, 1), Catch::Contains("cat: input 2 has shape [3, 3]") &&
                                           Catch::Contains("dim 0: 3 vs 2"));
  CHECK_THROWS_AS(cat({a, c}, 0), ShapeError);
  CHECK_THROWS_WITH(cat({a, c}, 0), Catch::Contains("input 1 has 3 dims"));
  CHECK_THROWS_AS(cat({scalar_tensor(1.0), scalar_tensor(2.0)}, 0), ShapeError);
  CHECK_THROWS_WITH(cat({scalar_tensor(1.0)}, 0), Catch::Contains("0-dim"));
  CHECK_THROWS_AS(cat({a, a}, 2), IndexError);
  CHECK_THROWS_WITH(cat({a, Tensor()}, 0), Catch::Contains("cat: input 1 is an undefined tensor"));
}

TEST_CASE("index: stack matches a loop reference along every dim") {
  for (DType dtype : {DType::f32, DType::f64, DType::i64, DType::boolean}) {
    std::vector<Tensor> inputs = {random_of({2, 3}, dtype, 20), random_of({2, 3}, dtype, 21),
                                  random_of({2, 3}, dtype, 22)};
    for (int64_t dim = 0; dim <= 2; ++dim) {
      Tensor out = stack(inputs, dim == 2 ? -1 : dim);
      Shape expected = {2, 3};
      expected.insert(expected.begin() + dim, 3);
      REQUIRE(out.shape() == expected);
      CHECK(out.dtype() == dtype);
      std::vector<double> values = out.tolist();
      for (int64_t o = 0; o < out.numel(); ++o) {
        Shape index = index_of(expected, o);
        int64_t which = index[dim];
        index.erase(index.begin() + dim);
        CHECK(values[o] == inputs[which].tolist()[offset_of({2, 3}, index)]);
      }
    }
  }
}

TEST_CASE("index: stack of non-contiguous, mixed-dtype and zero-size inputs") {
  Tensor a = random_f64({3, 2}, 23).t();
  Tensor b = random_f64({2, 3}, 24).to(DType::f32);
  Tensor out = stack({a, b}, 1);
  CHECK(out.dtype() == DType::f64);
  CHECK(out.shape() == Shape{2, 2, 3});
  CHECK(allclose(out.select(1, 0), a));
  CHECK(allclose(out.select(1, 1), b.to(DType::f64)));
  CHECK(stack({zeros({0, 2}), zeros({0, 2})}, 1).shape() == Shape{0, 2, 2});
  CHECK(stack({scalar_tensor(1.0), scalar_tensor(2.0)}, 0).tolist() == std::vector<double>{1, 2});
}

TEST_CASE("index: stack gradcheck") {
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return stack({in[0], in[1], in[0]}, 1);
      },
      {random_f64({2, 3}, 25), random_f64({2, 3}, 26)});
  Tensor a = random_f64({2}, 27).requires_grad_();
  Tensor out = stack({a, a}, 0);
  CHECK(out.grad_fn()->name() == "StackBackward");
}

TEST_CASE("index: stack errors") {
  CHECK_THROWS_AS(stack({}, 0), ValueError);
  CHECK_THROWS_WITH(stack({}, 0), Catch::Contains("stack"));
  CHECK_THROWS_AS(stack({zeros({2, 3}), zeros({2, 3}), zeros({3, 2})}, 0), ShapeError);
  CHECK_THROWS_WITH(
      stack({zeros({2, 3}), zeros({2, 3}), zeros({3, 2})}, 0),
      Catch::Contains("stack: input 2 has shape [3, 2] but input 0 has shape [2, 3]"));
  CHECK_THROWS_AS(stack({zeros({2, 3})}, 3), IndexError);
}

TEST_CASE("index: split by size returns views, the last one smaller") {
  Tensor x = random_f64({3, 7}, 28);
  std::vector<Tensor> pieces = split(x, 3, 1);
  REQUIRE(pieces.size() == 3);
  CHECK(sizes_along(pieces, 1) == std::vector<int64_t>{3, 3, 1});
  for (const Tensor& p : pieces) CHECK(p.storage() == x.storage());
  CHECK(equal(cat(pieces, 1), x));
  CHECK(split(x, 7, 1).size() == 1);
  CHECK(split(x, 100, -1).size() == 1);
  CHECK(sizes_along(split(x, 1, 0), 0) == std::vector<int64_t>{1, 1, 1});
  // An empty dim gives one empty piece.
  CHECK(sizes_along(split(zeros({0, 2}), 2, 0), 0) == std::vector<int64_t>{0});
  CHECK(sizes_along(split(zeros({0, 2}), 0, 0), 0) == std::vector<int64_t>{0});
}

TEST_CASE("index: split by a list of sizes") {
  Tensor x = non_contiguous(random_f64({6, 4}, 29));
  std::vector<Tensor> pieces = split(x, std::vector<int64_t>{1, 0, 3, 2}, 0);
  REQUIRE(pieces.size() == 4);
  CHECK(sizes_along(pieces, 0) == std::vector<int64_t>{1, 0, 3, 2});
  CHECK(equal(pieces[2], x.narrow(0, 1, 3)));
  CHECK(equal(cat(pieces, 0), x));
}

TEST_CASE("index: split gradcheck") {
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        std::vector<Tensor> p = split(in[0], std::vector<int64_t>{2, 1, 2}, 1);
        return add(mul(p[0], p[2]), p[1]);
      },
      {random_f64({3, 5}, 30)});
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return split(in[0], 2, 0)[1]; },
                  {random_f64({5, 2}, 31)});
}

TEST_CASE("index: split errors") {
  Tensor x = zeros({4, 3});
  CHECK_THROWS_AS(split(x, 0, 0), ValueError);
  CHECK_THROWS_WITH(split(x, -1, 0), Catch::Contains("split") && Catch::Contains("-1"));
  CHECK_THROWS_AS(split(x, std::vector<int64_t>{1, 2}, 0), ShapeError);
  CHECK_THROWS_WITH(split(x, std::vector<int64_t>{1, 2}, 0),
                    Catch::Contains("split: sizes [1, 2] sum to 3") && Catch::Contains("size 4"));
  CHECK_THROWS_AS(split(x, std::vector<int64_t>{5, -1}, 0), ValueError);
  CHECK_THROWS_AS(split(scalar_tensor(1.0), 1, 0), ShapeError);
  CHECK_THROWS_AS(split(x, 1, 2), IndexError);
}

TEST_CASE("index: chunk sizes follow PyTorch") {
  CHECK(sizes_along(chunk(zeros({6}), 3), 0) == std::vector<int64_t>{2, 2, 2});
  CHECK(sizes_along(chunk(zeros({7}), 3), 0) == std::vector<int64_t>{3, 3, 1});
  // ceil(5 / 4) = 2 per piece leaves only three pieces.
  CHECK(sizes_along(chunk(zeros({5}), 4), 0) == std::vector<int64_t>{2, 2, 1});
  CHECK(sizes_along(chunk(zeros({2}), 5), 0) == std::vector<int64_t>{1, 1});
  CHECK(sizes_along(chunk(zeros({2, 0}), 3, 1), 1) == std::vector<int64_t>{0, 0, 0});
  Tensor x = random_f64({2, 5}, 32);
  std::vector<Tensor> pieces = chunk(x, 2, -1);
  CHECK(equal(pieces[1], x.narrow(1, 3, 2)));
}

TEST_CASE("index: chunk gradcheck and errors") {
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return mul(chunk(in[0], 2, 1)[0], 3.0); },
                  {random_f64({2, 4}, 33)});
  CHECK_THROWS_AS(chunk(zeros({4}), 0), ValueError);
  CHECK_THROWS_WITH(chunk(zeros({4}), 0), Catch::Contains("chunk") && Catch::Contains("positive"));
  CHECK_THROWS_AS(chunk(scalar_tensor(1.0), 2), ShapeError);
}
