// max/min (with and without a dim), amax/amin and argmax/argmin against plain loops, their
// gradients (to the index, or shared between ties) and their errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"
#include "reference_loops.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::groups_of;
using kiln::testing::kExact;
using kiln::testing::non_contiguous;
using kiln::testing::random_f64;
using kiln::testing::reduced_mask;

namespace {

using Group = std::vector<double>;

// The position of the first maximum (or minimum) of a group; NaN beats every number.
int64_t extreme_index(const Group& g, bool is_max) {
  int64_t best = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i])) return static_cast<int64_t>(i);
    if (is_max ? g[i] > g[best] : g[i] < g[best]) best = static_cast<int64_t>(i);
  }
  return best;
}

Shape expected_shape(const Shape& shape, const std::vector<bool>& reduced, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d])
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

// [3, 4, 5] inputs of `dtype`: contiguous, permuted, strided and expanded; the last two have many
// ties (small integers), which pins down the first-occurrence rule.
std::vector<Tensor> inputs_345(DType dtype, uint64_t seed) {
  auto draw = [&](const Shape& shape, uint64_t s, bool ties) {
    Tensor values =
        ties ? randint(0, 3, shape, DType::i64).to(DType::f64) : random_f64(shape, s, -50.0, 50.0);
    if (!is_floating(dtype)) values = ties ? values : random_f64(shape, s, 0.0, 100.0);
    return values.to(dtype);
  };
  return {draw({3, 4, 5}, seed, false), draw({5, 3, 4}, seed + 1, false).permute({1, 2, 0}),
          draw({3, 8, 5}, seed + 2, true).slice(1, 1, 8, 2),
          draw({3, 1, 5}, seed + 3, true).expand({3, 4, 5})};
}

const DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::i32, DType::i64, DType::u8};

void check_max_min_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  INFO(shape_str(x.shape()) << " " << dtype_name(x.dtype()) << " dim " << dim << " keepdim "
                            << keepdim << (is_max ? " max" : " min"));
  std::vector<bool> reduced = reduced_mask({dim}, x.dim());
  ValuesIndices r = is_max ? max(x, dim, keepdim) : min(x, dim, keepdim);
  Tensor arg = is_max ? argmax(x, dim, keepdim) : argmin(x, dim, keepdim);
  Shape shape = expected_shape(x.shape(), reduced, keepdim);
  REQUIRE(r.values.shape() == shape);
  REQUIRE(r.indices.shape() == shape);
  REQUIRE(arg.shape() == shape);
  CHECK(r.values.dtype() == x.dtype());
  CHECK(r.indices.dtype() == DType::i64);
  CHECK(arg.dtype() == DType::i64);
  std::vector<double> want_values, want_indices;
  for (const Group& g : groups_of(x, reduced)) {
    const int64_t want = extreme_index(g, is_max);
    want_indices.push_back(static_cast<double>(want));
    want_values.push_back(g[want]);
  }
  check_close(r.indices, want_indices, kExact);
  check_close(arg, want_indices, kExact);
  check_close(r.values, want_values, kExact);
}

}  // namespace

// ---- max/min along a dim, argmax/argmin ----

TEST_CASE("reduce_minmax: max and min along each dim match loops for every dtype") {
  for (DType dtype : kDTypes)
    for (const Tensor& x : inputs_345(dtype, 3))
      for (int64_t dim : {0, 1, 2, -1, -3})
        for (bool keepdim : {false, true})
          for (bool is_max : {true, false}) check_max_min_dim(x, dim, keepdim, is_max);
}

TEST_CASE("reduce_minmax: max and min of bool tensors") {
  Tensor x = tensor<bool>({false, true, true, false, false, false}, {2, 3});
  ValuesIndices r = max(x, 1);
  CHECK(r.values.dtype() == DType::boolean);
  CHECK(r.values.tolist() == std::vector<double>{1, 0});
  CHECK(r.indices.tolist() == std::vector<double>{1, 0});
  CHECK(argmin(x, 1).tolist() == std::vector<double>{0, 0});
}

TEST_CASE("reduce_minmax: ties give the first index") {
  Tensor x = tensor({{2.0f, 5.0f, 5.0f, 1.0f}, {1.0f, 1.0f, 0.0f, 0.0f}});
  CHECK(max(x, 1).indices.tolist() == std::vector<double>{1, 0});
  CHECK(min(x, 1).indices.tolist() == std::vector<double>{3, 2});
  CHECK(argmax(x, 0).tolist() == std::vector<double>{0, 0, 0, 0});
  CHECK(argmax(x).item<int64_t>() == 1);
}

TEST_CASE("reduce_minmax: NaN is the max and the min, as in PyTorch") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = tensor({{1.0, nan, 3.0, nan}, {4.0, 2.0, 0.0, 1.0}});
  ValuesIndices big = max(x, 1), small = min(x, 1);
  CHECK(std::isnan(big.values.tolist()[0]));
  CHECK(big.indices.tolist() == std::vector<double>{1, 0});
  CHECK(std::isnan(small.values.tolist()[0]));
  CHECK(small.indices.tolist() == std::vector<double>{1, 2});
  CHECK(std::isnan(max(x).item<double>()));
  CHECK(std::isnan(amin(x, {1}).tolist()[0]));
  CHECK(argmax(x).item<int64_t>() == 1);
}

TEST_CASE("reduce_minmax: max along a dim of 0-dim and zero-size tensors") {
  Tensor s = scalar_tensor(7.0, DType::f64);
  ValuesIndices r = max(s, 0);
  CHECK(r.values.shape() == Shape{});
  CHECK(r.values.item<double>() == 7.0);
  CHECK(r.indices.item<int64_t>() == 0);
  CHECK(argmin(s, -1, true).shape() == Shape{});
  // Reducing a non-empty dim of a tensor with no elements gives an empty result.
  ValuesIndices e = max(zeros({0, 3}), 1);
  CHECK(e.values.shape() == Shape{0});
  CHECK(e.indices.shape() == Shape{0});
  CHECK(amax(zeros({0, 3}), {1}, true).shape() == Shape{0, 1});
}

TEST_CASE("reduce_minmax: argmax over everything indexes the flattened tensor") {
  for (DType dtype : {DType::f32, DType::f64, DType::i32}) {
    for (const Tensor& x : inputs_345(dtype, 17)) {
      Tensor a = argmax(x);
      CHECK(a.shape() == Shape{});
      CHECK(a.dtype() == DType::i64);
      CHECK(a.item<int64_t>() == extreme_index(x.tolist(), true));
    }
  }
  CHECK(argmax(scalar_tensor(1.0)).item<int64_t>() == 0);
}

// ---- max/min over everything, amax/amin ----

TEST_CASE("reduce_minmax: amax and amin match loops over every dim set") {
  const std::vector<Dims> dim_sets = {{}, {0}, {2}, {-1}, {0, 1}, {0, 2}, {2, 1}, {0, 1, 2}};
  for (DType dtype : kDTypes) {
    for (const Tensor& x : inputs_345(dtype, 5)) {
      for (const Dims& dims : dim_sets) {
        for (bool keepdim : {false, true}) {
          for (bool is_max : {true, false}) {
            INFO(dtype_name(dtype) << " dims " << shape_str(dims) << " keepdim " << keepdim);
            std::vector<bool> reduced = reduced_mask(dims, 3);
            Tensor out = is_max ? amax(x, dims, keepdim) : amin(x, dims, keepdim);
            REQUIRE(out.shape() == expected_shape(x.shape(), reduced, keepdim));
            CHECK(out.dtype() == dtype);
            std::vector<Group> groups = groups_of(x, reduced);
            std::vector<double> got = out.tolist();
            for (size_t i = 0; i < groups.size(); ++i)
              CHECK(got[i] == groups[i][extreme_index(groups[i], is_max)]);
          }
        }
      }
    }
  }
}

TEST_CASE("reduce_minmax: max and min over everything") {
  for (DType dtype : {DType::f32, DType::f64, DType::i64}) {
    for (const Tensor& x : inputs_345(dtype, 9)) {
      std::vector<double> all = x.tolist();
      Tensor big = max(x), small = min(x);
      CHECK(big.shape() == Shape{});
      CHECK(big.dtype() == dtype);
      CHECK(big.item<double>() == all[extreme_index(all, true)]);
      CHECK(small.item<double>() == all[extreme_index(all, false)]);
    }
  }
  Tensor x = random_f64({6, 7}, 10);
  CHECK(max(non_contiguous(x)).item<double>() == max(x).item<double>());
}

// ---- gradients ----

TEST_CASE("reduce_minmax: max and min along a dim gradcheck") {
  Tensor x = random_f64({3, 4, 2}, 71);
  for (int64_t dim : {0, 1, -1}) {
    for (bool keepdim : {false, true}) {
      CHECK_GRADCHECK(
          [&](const std::vector<Tensor>& in) { return max(in[0], dim, keepdim).values; }, {x});
      CHECK_GRADCHECK(
          [&](const std::vector<Tensor>& in) { return min(in[0], dim, keepdim).values; }, {x});
    }
  }
}

TEST_CASE("reduce_minmax: amax, amin, max and min gradcheck") {
  Tensor x = random_f64({3, 4, 2}, 72);
  for (const Dims& dims : std::vector<Dims>{{}, {1}, {0, 2}}) {
    for (bool keepdim : {false, true}) {
      CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return amax(in[0], dims, keepdim); },
                      {x});
      CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return amin(in[0], dims, keepdim); },
                      {x});
    }
  }
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return max(in[0]); }, {x});
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return min(in[0]); }, {x});
}

TEST_CASE("reduce_minmax: max along a dim sends the gradient to the first index only") {
  Tensor x = tensor({{1.0, 4.0, 4.0}, {2.0, 2.0, 0.0}}).requires_grad_();
  sum(mul(max(x, 1).values, tensor({10.0, 20.0}))).backward();
  CHECK(x.grad().tolist() == std::vector<double>{0, 10, 0, 20, 0, 0});
  Tensor y = tensor({{3.0, 1.0}, {1.0, 3.0}}).requires_grad_();
  min(y, 0, true).values.backward(tensor({{1.0, 2.0}}));
  CHECK(y.grad().tolist() == std::vector<double>{0, 2, 1, 0});
}

TEST_CASE("reduce_minmax: amax and max share the gradient evenly between ties") {
  Tensor x = tensor({{1.0, 3.0, 3.0}, {5.0, 5.0, 5.0}}).requires_grad_();
  amax(x, {1}).backward(tensor({1.0, 3.0}));
  CHECK(x.grad().tolist() == std::vector<double>{0, 0.5, 0.5, 1, 1, 1});
  Tensor y = tensor({2.0, -1.0, -1.0, 0.0}).requires_grad_();
  min(y).backward();
  CHECK(y.grad().tolist() == std::vector<double>{0, 0.5, 0.5, 0});
}

TEST_CASE("reduce_minmax: argmax and indices carry no gradient") {
  Tensor x = random_f64({3, 4}, 73).requires_grad_();
  CHECK_FALSE(argmax(x, 1).requires_grad());
  CHECK_FALSE(max(x, 1).indices.requires_grad());
  CHECK(max(x, 1).values.requires_grad());
}

// ---- errors ----

TEST_CASE("reduce_minmax: reducing zero elements is a ValueError naming the op") {
  Tensor x = zeros({3, 0});
  CHECK_THROWS_AS(max(x, 1), ValueError);
  CHECK_THROWS_WITH(max(x, 1), Catch::Contains("max") && Catch::Contains("zero elements"));
  CHECK_THROWS_WITH(min(x, -1), Catch::Contains("min"));
  CHECK_THROWS_AS(max(zeros({0})), ValueError);
  CHECK_THROWS_WITH(min(zeros({0})), Catch::Contains("min"));
  CHECK_THROWS_AS(amax(x, {0, 1}), ValueError);
  CHECK_THROWS_WITH(amin(x), Catch::Contains("amin"));
  CHECK_THROWS_AS(argmax(x, 1), ValueError);
  CHECK_THROWS_WITH(argmax(x, 1), Catch::Contains("argmax"));
  CHECK_THROWS_WITH(argmin(x, 1), Catch::Contains("argmin"));
  CHECK_THROWS_AS(argmax(zeros({0, 2})), ValueError);
  CHECK_THROWS_WITH(argmax(zeros({0, 2})), Catch::Contains("argmax"));
}

TEST_CASE("reduce_minmax: bad dims are an IndexError naming the op") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_AS(max(x, 2), IndexError);
  CHECK_THROWS_WITH(max(x, 2), Catch::Contains("max"));
  CHECK_THROWS_AS(min(x, -3), IndexError);
  CHECK_THROWS_AS(argmax(x, 5), IndexError);
  CHECK_THROWS_WITH(argmin(x, 5), Catch::Contains("argmin"));
  CHECK_THROWS_AS(amax(x, {0, -2}), IndexError);
  CHECK_THROWS_WITH(amax(x, {0, -2}), Catch::Contains("amax"));
  CHECK_THROWS_AS(amin(x, {3}), IndexError);
  CHECK_THROWS_AS(max(scalar_tensor(1.0), 1), IndexError);
}

TEST_CASE("reduce_minmax: undefined input is a ValueError") {
  CHECK_THROWS_AS(max(Tensor()), ValueError);
  CHECK_THROWS_AS(argmax(Tensor(), 0), ValueError);
}

TEST_CASE("reduce_minmax: inputs large enough to split across threads match loops") {
  Tensor x = random_f64({400, 300}, 81);
  for (int64_t dim : {0, 1}) check_max_min_dim(x, dim, false, dim == 0);
}
