// Integer indexing: index_select, gather, scatter_add, index_add, one_hot, embedding.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"
#include "reference_loops.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::gradcheck;
using kiln::testing::index_of;
using kiln::testing::non_contiguous;
using kiln::testing::offset_of;
using kiln::testing::random_f64;
using kiln::testing::tolerance;

namespace {

Tensor random_of(const Shape& shape, DType dtype, uint64_t seed) {
  if (is_floating(dtype)) return random_f64(shape, seed, -2.0, 2.0).to(dtype);
  Generator gen(seed);
  return randint(0, dtype == DType::boolean ? 2 : 50, shape, DType::i64, Device::cpu(), &gen)
      .to(dtype);
}

Tensor random_index(int64_t high, const Shape& shape, uint64_t seed, DType dtype = DType::i64) {
  Generator gen(seed);
  return randint(0, high, shape, dtype, Device::cpu(), &gen);
}

std::vector<double> index_select_reference(const Tensor& x, int64_t dim, const Tensor& index) {
  std::vector<double> xv = x.tolist(), iv = index.tolist();
  Shape out_shape = x.shape();
  out_shape[dim] = index.numel();
  std::vector<double> out(shape_numel(out_shape));
  for (int64_t o = 0; o < static_cast<int64_t>(out.size()); ++o) {
    Shape at = index_of(out_shape, o);
    at[dim] = static_cast<int64_t>(iv[at[dim]]);
    out[o] = xv[offset_of(x.shape(), at)];
  }
  return out;
}

std::vector<double> gather_reference(const Tensor& x, int64_t dim, const Tensor& index) {
  std::vector<double> xv = x.tolist(), iv = index.tolist();
  std::vector<double> out(iv.size());
  for (int64_t o = 0; o < static_cast<int64_t>(out.size()); ++o) {
    Shape at = index_of(index.shape(), o);
    at[dim] = static_cast<int64_t>(iv[o]);
    out[o] = xv[offset_of(x.shape(), at)];
  }
  return out;
}

std::vector<double> scatter_add_reference(const Tensor& self, int64_t dim, const Tensor& index,
                                          const Tensor& src) {
  std::vector<double> out = self.tolist(), iv = index.tolist(), sv = src.tolist();
  for (int64_t i = 0; i < index.numel(); ++i) {
    Shape at = index_of(index.shape(), i);
    double value = sv[offset_of(src.shape(), at)];
    at[dim] = static_cast<int64_t>(iv[i]);
    out[offset_of(self.shape(), at)] += value;
  }
  return out;
}

std::vector<double> index_add_reference(const Tensor& self, int64_t dim, const Tensor& index,
                                        const Tensor& src) {
  std::vector<double> out = self.tolist(), iv = index.tolist(), sv = src.tolist();
  for (int64_t s = 0; s < src.numel(); ++s) {
    Shape at = index_of(src.shape(), s);
    at[dim] = static_cast<int64_t>(iv[at[dim]]);
    out[offset_of(self.shape(), at)] += sv[s];
  }
  return out;
}

}  // namespace

// ---- index_select ----

TEST_CASE("gather_scatter: index_select matches a loop reference along every dim") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = random_of({3, 4, 5}, dtype, 1);
    for (int64_t dim = 0; dim < 3; ++dim) {
      for (DType index_dtype : {DType::i64, DType::i32}) {
        Tensor index = random_index(x.size(dim), {7}, 2 + dim, index_dtype);  // repeats
        Tensor out = index_select(x, dim, index);
        Shape expected = x.shape();
        expected[dim] = 7;
        CHECK(out.shape() == expected);
        CHECK(out.tolist() == index_select_reference(x, dim, index));
      }
    }
  }
}

TEST_CASE("gather_scatter: index_select of non-contiguous inputs, all dtypes, zero size") {
  Tensor index = tensor<int64_t>({2, 0, 2});
  Tensor x = random_f64({5, 3}, 3).t();  // [3, 5]
  CHECK(index_select(x, 1, index).tolist() == index_select_reference(x, 1, index));
  Tensor strided_index = tensor<int64_t>({2, 9, 0, 9, 1, 9}).slice(0, 0, 6, 2);
  CHECK(index_select(x, 0, strided_index).tolist() == index_select_reference(x, 0, strided_index));
  for (DType dtype : {DType::f16, DType::bf16, DType::i32, DType::u8, DType::boolean}) {
    Tensor xi = random_of({4, 3}, dtype, 4);
    Tensor out = index_select(xi, 0, index);
    CHECK(out.dtype() == dtype);
    CHECK(out.tolist() == index_select_reference(xi, 0, index));
  }
  CHECK(index_select(x, 1, zeros({0}, DType::i64)).shape() == Shape{3, 0});
  CHECK(index_select(zeros({0, 4}), 1, index).shape() == Shape{0, 3});
  CHECK(index_select(x, 0, scalar_tensor(1, DType::i64)).tolist() == x.select(0, 1).tolist());
}

TEST_CASE("gather_scatter: index_select gradcheck with repeated indices") {
  Tensor index = tensor<int64_t>({1, 3, 1, 0});
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return index_select(in[0], 1, index); },
                  {random_f64({2, 4, 3}, 5)});
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return index_select(in[0], 0, index); },
                  {random_f64({4, 2}, 6)});
}

TEST_CASE("gather_scatter: index_select errors") {
  Tensor x = zeros({4, 3});
  CHECK_THROWS_AS(index_select(x, 0, tensor<int64_t>({0, 4})), IndexError);
  CHECK_THROWS_WITH(index_select(x, 0, tensor<int64_t>({0, 4})),
                    Catch::Contains("index_select: index 4 is out of range for dim 0 of size 4") &&
                        Catch::Contains("[0, 4)"));
  CHECK_THROWS_WITH(index_select(x, 1, tensor<int64_t>({-1})),
                    Catch::Contains("index -1") && Catch::Contains("[0, 3)"));
  CHECK_THROWS_AS(index_select(x, 0, tensor({0.0f})), DTypeError);
  CHECK_THROWS_WITH(index_select(x, 0, tensor({0.0f})), Catch::Contains("index_select"));
  CHECK_THROWS_AS(index_select(x, 0, zeros({1, 1}, DType::i64)), ShapeError);
  CHECK_THROWS_AS(index_select(x, 2, tensor<int64_t>({0})), IndexError);
  CHECK_THROWS_AS(index_select(scalar_tensor(1.0), 0, tensor<int64_t>({0})), ShapeError);
}

// ---- gather ----

TEST_CASE("gather_scatter: gather matches a loop reference along every dim") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = random_of({3, 4, 5}, dtype, 7);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Shape index_shape = {2, 3, 4};  // smaller than x outside dim too
      index_shape[dim] = 6;
      Tensor index = random_index(x.size(dim), index_shape, 8 + dim);
      Tensor out = gather(x, dim, index);
      CHECK(out.shape() == index_shape);
      CHECK(out.tolist() == gather_reference(x, dim, index));
      CHECK(gather(x, dim, index.to(DType::i32)).tolist() == out.tolist());
    }
  }
}

TEST_CASE("gather_scatter: gather of non-contiguous inputs, all dtypes, zero size") {
  Tensor x = random_f64({6, 4}, 9).t();            // [4, 6]
  Tensor index = random_index(6, {3, 4}, 10).t();  // [4, 3], transposed
  CHECK(gather(x, 1, index).tolist() == gather_reference(x, 1, index));
  Tensor expanded = random_f64({1, 6}, 11).expand({4, 6});
  CHECK(gather(expanded, 1, index).tolist() == gather_reference(expanded, 1, index));
  for (DType dtype : {DType::f16, DType::bf16, DType::i64, DType::u8, DType::boolean}) {
    Tensor xi = random_of({4, 6}, dtype, 12);
    Tensor out = gather(xi, 1, index);
    CHECK(out.dtype() == dtype);
    CHECK(out.tolist() == gather_reference(xi, 1, index));
  }
  CHECK(gather(x, 1, zeros({4, 0}, DType::i64)).shape() == Shape{4, 0});
  CHECK(gather(x, 0, zeros({0, 6}, DType::i64)).shape() == Shape{0, 6});
}

TEST_CASE("gather_scatter: gather gradcheck") {
  Tensor index = tensor<int64_t>({{0, 2, 2}, {1, 1, 0}});
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return gather(in[0], 1, index); },
                  {random_f64({3, 4}, 13)});
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return gather(in[0], 0, index); },
                  {random_f64({3, 4}, 14)});
}

TEST_CASE("gather_scatter: gather errors") {
  Tensor x = zeros({3, 4});
  CHECK_THROWS_AS(gather(x, 1, tensor<int64_t>({{0, 4}})), IndexError);
  CHECK_THROWS_WITH(gather(x, 1, tensor<int64_t>({{0, 4}})),
                    Catch::Contains("gather: index 4 is out of range for dim 1 of size 4") &&
                        Catch::Contains("[0, 4)"));
  CHECK_THROWS_WITH(gather(x, 0, tensor<int64_t>({{-2, 0}})), Catch::Contains("index -2"));
  CHECK_THROWS_AS(gather(x, 1, tensor<int64_t>({0, 1})), ShapeError);
  CHECK_THROWS_WITH(gather(x, 1, tensor<int64_t>({0, 1})),
                    Catch::Contains("gather") && Catch::Contains("as many dims"));
  CHECK_THROWS_AS(gather(x, 1, zeros({4, 1}, DType::i64)), ShapeError);
  CHECK_THROWS_WITH(gather(x, 1, zeros({4, 1}, DType::i64)), Catch::Contains("dim 0 (4 > 3)"));
  CHECK_THROWS_AS(gather(x, 1, zeros({3, 1}, DType::f32)), DTypeError);
}

// ---- scatter_add ----

TEST_CASE("gather_scatter: scatter_add matches a loop reference along every dim") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor self = random_of({3, 4, 5}, dtype, 15);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Shape index_shape = {2, 3, 4};
      index_shape[dim] = 6;  // more entries than self has along dim: repeats accumulate
      Shape src_shape = {3, 4, 5};
      src_shape[dim] = 7;  // src may be larger than index
      Tensor index = random_index(self.size(dim), index_shape, 16 + dim);
      Tensor src = random_of(src_shape, dtype, 19 + dim);
      Tensor out = scatter_add(self, dim, index, src);
      CHECK(out.shape() == self.shape());
      check_close(out, scatter_add_reference(self, dim, index, src), tolerance(dtype));
      check_close(scatter_add(self, dim, index.to(DType::i32), src), out, tolerance(dtype));
    }
  }
}

TEST_CASE("gather_scatter: scatter_add of non-contiguous inputs, integer dtypes, zero size") {
  Tensor self = random_f64({5, 3}, 22).t();  // [3, 5]
  Tensor src = random_f64({1, 4}, 23).expand({3, 4});
  Tensor index = random_index(5, {4, 3}, 24).t();
  Tensor out = scatter_add(self, 1, index, src);
  check_close(out, scatter_add_reference(self, 1, index, src), tolerance(DType::f64));
  CHECK(self.tolist() == random_f64({5, 3}, 22).t().tolist());  // self is not modified
  for (DType dtype : {DType::i32, DType::i64, DType::u8}) {
    Tensor si = random_of({3, 5}, dtype, 25), xi = random_of({3, 4}, dtype, 26);
    Tensor result = scatter_add(si, 1, index, xi);
    CHECK(result.dtype() == dtype);
    CHECK(result.tolist() == scatter_add_reference(si, 1, index, xi));
  }
  // f16 rounds after every add, so it only matches the f64 reference to f16 precision: one
  // rounding per source added, and up to all four sources of a row land in one slot here.
  constexpr double kAddsPerSlot = 4.0;
  Tensor sh = random_of({3, 5}, DType::f16, 25), xh = random_of({3, 4}, DType::f16, 26);
  check_close(scatter_add(sh, 1, index, xh), scatter_add_reference(sh, 1, index, xh),
              tolerance(DType::f16).times(kAddsPerSlot));
  CHECK(scatter_add(self, 1, zeros({3, 0}, DType::i64), src).tolist() == self.tolist());
}

TEST_CASE("gather_scatter: scatter_add with many lines runs on several threads correctly") {
  // Enough lines (rows outside dim) for the loop to split them across threads.
  Tensor self = random_f64({40000, 3}, 27);
  Tensor index = random_index(3, {40000, 4}, 28);
  Tensor src = random_f64({40000, 4}, 29);
  check_close(scatter_add(self, 1, index, src), scatter_add_reference(self, 1, index, src),
              tolerance(DType::f64));
  Tensor index0 = random_index(3, {5, 40000}, 30);
  Tensor src0 = random_f64({5, 40000}, 31);
  Tensor wide = random_f64({3, 40000}, 32);
  check_close(scatter_add(wide, 0, index0, src0), scatter_add_reference(wide, 0, index0, src0),
              tolerance(DType::f64));
}

TEST_CASE("gather_scatter: scatter_add gradcheck for self and src") {
  Tensor index = tensor<int64_t>({{0, 2, 2}, {1, 1, 0}});
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& in) { return scatter_add(in[0], 1, index, in[1]); },
      {random_f64({3, 4}, 33), random_f64({2, 3}, 34)});
  // src larger than index: the part index does not reach gets a zero gradient.
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& in) { return scatter_add(in[0], 0, index, in[1]); },
      {random_f64({3, 4}, 35), random_f64({3, 5}, 36)});
}

TEST_CASE("gather_scatter: scatter_add errors") {
  Tensor self = zeros({3, 4});
  Tensor src = ones({2, 2});
  CHECK_THROWS_AS(scatter_add(self, 0, tensor<int64_t>({{0, 3}}), src), IndexError);
  CHECK_THROWS_WITH(scatter_add(self, 0, tensor<int64_t>({{0, 3}}), src),
                    Catch::Contains("scatter_add: index 3 is out of range for dim 0 of size 3") &&
                        Catch::Contains("[0, 3)"));
  CHECK_THROWS_WITH(scatter_add(self, 1, tensor<int64_t>({{-1, 0}}), src),
                    Catch::Contains("index -1"));
  CHECK_THROWS_AS(scatter_add(self, 0, tensor<int64_t>({{0, 1}}), ones({2, 2}, DType::f64)),
                  DTypeError);
  CHECK_THROWS_WITH(scatter_add(self, 0, tensor<int64_t>({{0, 1}}), ones({2, 2}, DType::f64)),
                    Catch::Contains("scatter_add") && Catch::Contains("same dtype"));
  CHECK_THROWS_AS(scatter_add(self, 0, zeros({1, 3}, DType::i64), src), ShapeError);
  CHECK_THROWS_WITH(scatter_add(self, 0, zeros({1, 3}, DType::i64), src),
                    Catch::Contains("larger than src"));
  CHECK_THROWS_AS(scatter_add(self, 0, zeros({3}, DType::i64), src), ShapeError);
}

// ---- index_add ----

TEST_CASE("gather_scatter: index_add matches a loop reference along every dim") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor self = random_of({3, 4, 5}, dtype, 37);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Tensor index =
          random_index(self.size(dim), {6}, 38 + dim, dim == 1 ? DType::i32 : DType::i64);
      Shape src_shape = self.shape();
      src_shape[dim] = 6;
      Tensor src = random_of(src_shape, dtype, 41 + dim);
      Tensor out = index_add(self, dim, index, src);
      CHECK(out.shape() == self.shape());
      check_close(out, index_add_reference(self, dim, index, src), tolerance(dtype));
    }
  }
}

TEST_CASE(
    "gather_scatter: index_add of non-contiguous inputs, integer dtypes, large and zero size") {
  Tensor self = random_f64({4, 3}, 44).t();  // [3, 4]
  Tensor src = random_f64({5, 3}, 45).t();   // [3, 5]
  Tensor index = tensor<int64_t>({3, 0, 3, 3, 1});
  check_close(index_add(self, 1, index, src), index_add_reference(self, 1, index, src),
              tolerance(DType::f64));
  for (DType dtype : {DType::i64, DType::u8, DType::boolean}) {
    Tensor si = random_of({3, 4}, dtype, 46), xi = random_of({3, 5}, dtype, 47);
    Tensor result = index_add(si, 1, index, xi);
    CHECK(result.dtype() == dtype);
    std::vector<double> want = index_add_reference(si, 1, index, xi);
    if (dtype == DType::boolean)
      for (double& v : want) v = v != 0.0;
    CHECK(result.tolist() == want);
  }
  // dim 0 with wide rows and dim 1 with many blocks both take the threaded paths.
  Tensor big = random_f64({50, 1000}, 48);
  Tensor rows = random_index(50, {80}, 49);
  Tensor big_src = random_f64({80, 1000}, 50);
  check_close(index_add(big, 0, rows, big_src), index_add_reference(big, 0, rows, big_src),
              tolerance(DType::f64));
  Tensor tall = random_f64({2000, 30}, 63);
  Tensor cols = random_index(30, {60}, 51);
  Tensor col_src = random_f64({60, 2000}, 52).t();
  check_close(index_add(tall, 1, cols, col_src), index_add_reference(tall, 1, cols, col_src),
              tolerance(DType::f64));
  CHECK(index_add(self, 1, zeros({0}, DType::i64), zeros({3, 0}, DType::f64)).tolist() ==
        self.tolist());
}

TEST_CASE("gather_scatter: index_add gradcheck for self and src") {
  Tensor index = tensor<int64_t>({2, 0, 2});
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return index_add(in[0], 1, index, in[1]); },
                  {random_f64({2, 4}, 53), random_f64({2, 3}, 54)});
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return index_add(in[0], 0, index, in[1]); },
                  {random_f64({3, 2}, 55), random_f64({3, 2}, 56)});
}

TEST_CASE("gather_scatter: index_add errors") {
  Tensor self = zeros({3, 4});
  CHECK_THROWS_AS(index_add(self, 0, tensor<int64_t>({0, 5}), ones({2, 4})), IndexError);
  CHECK_THROWS_WITH(index_add(self, 0, tensor<int64_t>({0, 5}), ones({2, 4})),
                    Catch::Contains("index_add: index 5 is out of range for dim 0 of size 3") &&
                        Catch::Contains("[0, 3)"));
  CHECK_THROWS_AS(index_add(self, 0, tensor<int64_t>({0, 1}), ones({2, 3})), ShapeError);
  CHECK_THROWS_WITH(index_add(self, 0, tensor<int64_t>({0, 1}), ones({2, 3})),
                    Catch::Contains("index_add") && Catch::Contains("[2, 4]"));
  CHECK_THROWS_AS(index_add(self, 0, tensor<int64_t>({0}), ones({1, 4}, DType::f64)), DTypeError);
  CHECK_THROWS_AS(index_add(self, 0, tensor({0.0f}), ones({1, 4})), DTypeError);
}

// ---- one_hot ----

TEST_CASE("gather_scatter: one_hot matches a loop reference") {
  Tensor labels = tensor<int64_t>({{2, 0, 1}, {1, 1, 4}});
  Tensor out = one_hot(labels, 6);
  CHECK(out.dtype() == DType::i64);
  CHECK(out.shape() == Shape{2, 3, 6});
  std::vector<double> values = out.tolist(), lv = labels.tolist();
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t c = 0; c < 6; ++c) CHECK(values[i * 6 + c] == (lv[i] == c ? 1.0 : 0.0));
  CHECK(one_hot(labels).shape() == Shape{2, 3, 5});  // inferred from max + 1
  CHECK(equal(one_hot(labels.to(DType::i32).t(), 6), out.transpose(0, 1)));
  CHECK(one_hot(zeros({0}, DType::i64), 3).shape() == Shape{0, 3});
  CHECK(one_hot(scalar_tensor(1, DType::i64), 3).tolist() == std::vector<double>{0, 1, 0});
}

TEST_CASE("gather_scatter: one_hot errors") {
  CHECK_THROWS_AS(one_hot(tensor<int64_t>({0, 3}), 3), IndexError);
  CHECK_THROWS_WITH(one_hot(tensor<int64_t>({0, 3}), 3),
                    Catch::Contains("one_hot: index 3") && Catch::Contains("[0, 3)"));
  CHECK_THROWS_WITH(one_hot(tensor<int64_t>({-1, 0})), Catch::Contains("one_hot: index -1"));
  CHECK_THROWS_AS(one_hot(zeros({0}, DType::i64)), ValueError);
  CHECK_THROWS_AS(one_hot(tensor<int64_t>({0}), -2), ValueError);
  CHECK_THROWS_AS(one_hot(tensor({1.0f})), DTypeError);
}

// ---- embedding ----

TEST_CASE("gather_scatter: embedding matches a loop reference") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor weight = random_of({6, 4}, dtype, 57);
    Tensor indices = random_index(6, {3, 5}, 58);
    Tensor out = embedding(weight, indices);
    CHECK(out.shape() == Shape{3, 5, 4});
    std::vector<double> wv = weight.tolist(), iv = indices.tolist(), ov = out.tolist();
    for (int64_t i = 0; i < 15; ++i)
      for (int64_t j = 0; j < 4; ++j)
        CHECK(ov[i * 4 + j] == wv[static_cast<int64_t>(iv[i]) * 4 + j]);
  }
  Tensor weight = non_contiguous(random_f64({5, 3}, 59));
  Tensor indices = tensor<int64_t>({4, 0, 4}).to(DType::i32);
  CHECK(equal(embedding(weight, indices), index_select(weight, 0, indices)));
  CHECK(embedding(weight, scalar_tensor(2, DType::i64)).tolist() == weight.select(0, 2).tolist());
  CHECK(embedding(weight, zeros({2, 0}, DType::i64)).shape() == Shape{2, 0, 3});
}

TEST_CASE("gather_scatter: embedding gradcheck, with and without padding_idx") {
  Tensor indices = tensor<int64_t>({{1, 3, 1}, {0, 3, 2}});
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return embedding(in[0], indices); },
                  {random_f64({4, 3}, 60)});
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return embedding(in[0], indices, 5); },
                  {random_f64({6, 2}, 61)});
}

TEST_CASE("gather_scatter: embedding rows at padding_idx get no gradient") {
  Tensor weight = random_f64({4, 3}, 62).requires_grad_();
  Tensor indices = tensor<int64_t>({1, 3, 1, 2, 3});
  Tensor out = embedding(weight, indices, 3);
  CHECK(out.grad_fn()->name() == "EmbeddingBackward");
  out.backward(ones({5, 3}, DType::f64));
  CHECK(weight.grad().tolist() == std::vector<double>{0, 0, 0, 2, 2, 2, 1, 1, 1, 0, 0, 0});
  // The padding row is still read in the forward.
  CHECK(out.select(0, 1).tolist() == weight.select(0, 3).tolist());
}

TEST_CASE("gather_scatter: a padding row that is read fails gradcheck there, by definition") {
  // PyTorch's rule: the padding row gets no gradient although the forward reads it, so central
  // differences see a dependence that the analytic gradient leaves out, on that row only.
  const Tensor indices = tensor<int64_t>({{1, 0}, {1, 2}});
  const kiln::testing::GradcheckResult r = kiln::testing::gradcheck(
      [&](const std::vector<Tensor>& in) { return embedding(in[0], indices, 0); },
      {random_f64({3, 2}, 46)});
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("input 0 element 0: analytic 0") &&
                            Catch::Contains("input 0 element 1: analytic 0") &&
                            !Catch::Contains("element 2"));
}

TEST_CASE("gather_scatter: embedding errors") {
  Tensor weight = zeros({4, 3});
  CHECK_THROWS_AS(embedding(weight, tensor<int64_t>({1, 4})), IndexError);
  CHECK_THROWS_WITH(embedding(weight, tensor<int64_t>({1, 4})),
                    Catch::Contains("embedding: index 4") && Catch::Contains("[0, 4)"));
  CHECK_THROWS_WITH(embedding(weight, tensor<int64_t>({-3})),
                    Catch::Contains("embedding: index -3"));
  CHECK_THROWS_AS(embedding(weight, tensor<int64_t>({1}), 4), IndexError);
  CHECK_THROWS_WITH(embedding(weight, tensor<int64_t>({1}), 4), Catch::Contains("padding_idx 4"));
  CHECK_THROWS_AS(embedding(zeros({4}), tensor<int64_t>({1})), ShapeError);
  CHECK_THROWS_WITH(embedding(zeros({4}), tensor<int64_t>({1})),
                    Catch::Contains("embedding") && Catch::Contains("2-D weight"));
  CHECK_THROWS_AS(embedding(weight, tensor({1.0f})), DTypeError);
}
