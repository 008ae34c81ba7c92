// sum, mean, var, std_dev, norm, sum_to and cumsum against plain loops, plus gradchecks and errors.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
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
using kiln::testing::Tolerance;
using kiln::testing::tolerance;

namespace {

using Group = std::vector<double>;
using Fold = std::function<double(const Group&)>;

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

// Checks op(x, dims, keepdim) against fold applied to each group.
void check_against_loops(const std::function<Tensor(const Tensor&, const Dims&, bool)>& op,
                         const Fold& fold, const Tensor& x, const Dims& dims, bool keepdim,
                         Tolerance tol) {
  INFO("input " << shape_str(x.shape()) << " " << dtype_name(x.dtype()) << " dims "
                << shape_str(dims) << " keepdim " << keepdim);
  std::vector<bool> reduced = reduced_mask(dims, x.dim());
  Tensor out = op(x, dims, keepdim);
  REQUIRE(out.shape() == expected_shape(x.shape(), reduced, keepdim));
  std::vector<double> want;
  for (const Group& g : groups_of(x, reduced)) want.push_back(fold(g));
  check_close(out, want, tol);
}

const std::vector<Dims> kDimSets3 = {{},     {0},    {1},    {2},    {-1},      {-3},
                                     {0, 1}, {0, 2}, {1, 2}, {2, 0}, {0, 1, 2}, {-1, 0}};

// Inputs of shape [3, 4, 5]: contiguous, a permuted view, a strided slice and an expanded view.
std::vector<Tensor> inputs_345(DType dtype, uint64_t seed) {
  Tensor base = random_f64({3, 4, 5}, seed, -2.0, 2.0).to(dtype);
  Tensor permuted = random_f64({5, 3, 4}, seed + 1, -2.0, 2.0).to(dtype).permute({1, 2, 0});
  Tensor sliced = random_f64({3, 8, 5}, seed + 2, -2.0, 2.0).to(dtype).slice(1, 0, 8, 2);
  Tensor expanded = random_f64({3, 1, 5}, seed + 3, -2.0, 2.0).to(dtype).expand({3, 4, 5});
  return {base, permuted, sliced, expanded};
}

void check_all_dim_sets(const std::function<Tensor(const Tensor&, const Dims&, bool)>& op,
                        const Fold& fold, DType dtype) {
  for (const Tensor& x : inputs_345(dtype, 7))
    for (const Dims& dims : kDimSets3)
      for (bool keepdim : {false, true})
        check_against_loops(op, fold, x, dims, keepdim, tolerance(dtype));
}

double fold_sum(const Group& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
double fold_mean(const Group& g) {
  return fold_sum(g) / static_cast<double>(g.size());
}
Fold fold_var(int64_t correction) {
  return [correction](const Group& g) {
    double m = fold_mean(g), s = 0;
    for (double v : g) s += (v - m) * (v - m);
    return s /
           static_cast<double>(std::max<int64_t>(0, static_cast<int64_t>(g.size()) - correction));
  };
}
Fold fold_norm(double p) {
  return [p](const Group& g) {
    double s = 0;
    if (std::isinf(p)) {
      for (double v : g) s = std::max(s, std::abs(v));
      return s;
    }
    for (double v : g) s += std::pow(std::abs(v), p);
    return std::pow(s, 1.0 / p);
  };
}

Tensor sum_op(const Tensor& x, const Dims& d, bool k) {
  return sum(x, d, k);
}
Tensor mean_op(const Tensor& x, const Dims& d, bool k) {
  return mean(x, d, k);
}

}  // namespace

// ---- sum and mean ----

TEST_CASE("reduce: sum matches loops over every dim set, f32 and f64") {
  for (DType dtype : {DType::f32, DType::f64}) check_all_dim_sets(sum_op, fold_sum, dtype);
}

TEST_CASE("reduce: mean matches loops over every dim set, f32 and f64") {
  for (DType dtype : {DType::f32, DType::f64}) check_all_dim_sets(mean_op, fold_mean, dtype);
}

TEST_CASE("reduce: sum of a 4-d tensor over scattered dims") {
  Tensor x = random_f64({2, 3, 2, 4}, 11);
  for (const Dims& dims : std::vector<Dims>{{0, 2}, {1, 3}, {0, 3}, {3, 1, 0}})
    check_against_loops(sum_op, fold_sum, non_contiguous(x), dims, true, tolerance(DType::f64));
}

TEST_CASE("reduce: sum of integers and bools gives i64") {
  Tensor x = randint(-50, 50, {3, 4, 5}, DType::i32);
  for (const Dims& dims : kDimSets3) {
    Tensor out = sum(x, dims);
    CHECK(out.dtype() == DType::i64);
    check_against_loops(sum_op, fold_sum, x, dims, false, kExact);
  }
  Tensor flags = tensor({true, false, true, true});
  Tensor count = sum(flags);
  CHECK(count.dtype() == DType::i64);
  CHECK(count.item<int64_t>() == 3);
  CHECK(sum(tensor<uint8_t>({200, 100})).item<int64_t>() == 300);
}

TEST_CASE("reduce: sum and mean of zero-size tensors") {
  Tensor x = zeros({0, 3});
  Tensor s0 = sum(x, {0});
  CHECK(s0.shape() == Shape{3});
  CHECK(s0.tolist() == std::vector<double>{0, 0, 0});
  CHECK(sum(x, {1}).shape() == Shape{0});
  CHECK(sum(x).item<double>() == 0.0);
  Tensor m = mean(x, {0});
  for (double v : m.tolist()) CHECK(std::isnan(v));
  CHECK(sum(x, {0}, true).shape() == Shape{1, 3});
}

TEST_CASE("reduce: sum and mean of a 0-dim tensor") {
  Tensor x = scalar_tensor(2.5, DType::f64);
  CHECK(sum(x).item<double>() == 2.5);
  CHECK(sum(x, {0}).shape() == Shape{});
  CHECK(mean(x, {-1}, true).item<double>() == 2.5);
}

TEST_CASE("reduce: sum of 16-bit floats accumulates in higher precision") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    Tensor x = ones({4096}, dtype);
    Tensor s = sum(x);
    CHECK(s.dtype() == dtype);
    CHECK(s.item<double>() == 4096.0);
  }
}

TEST_CASE("reduce: sum and mean gradcheck") {
  Tensor x = random_f64({3, 4, 2}, 21);
  for (const Dims& dims : std::vector<Dims>{{}, {1}, {0, 2}, {-1}}) {
    for (bool keepdim : {false, true}) {
      CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return sum(in[0], dims, keepdim); },
                      {x});
      CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return mean(in[0], dims, keepdim); },
                      {x});
    }
  }
}

TEST_CASE("reduce: sum and mean errors name the op") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_AS(sum(x, {2}), IndexError);
  CHECK_THROWS_WITH(sum(x, {2}), Catch::Contains("sum"));
  CHECK_THROWS_AS(sum(x, {-3}), IndexError);
  CHECK_THROWS_AS(mean(x, {1, -1}), IndexError);
  CHECK_THROWS_WITH(mean(x, {1, -1}), Catch::Contains("mean") && Catch::Contains("more than once"));
  CHECK_THROWS_AS(mean(zeros({2}, DType::i64)), DTypeError);
  CHECK_THROWS_WITH(mean(zeros({2}, DType::i64)), Catch::Contains("mean"));
  CHECK_THROWS_AS(sum(Tensor()), ValueError);
}

// ---- sum_to ----

TEST_CASE("reduce: sum_to matches loops") {
  Tensor x = random_f64({2, 3, 4}, 31);
  struct Case {
    Shape target;
    Dims dims;  // the dims of x that fold
  };
  for (const Case& c : std::vector<Case>{{{3, 4}, {0}},
                                         {{3, 1}, {0, 2}},
                                         {{1, 4}, {0, 1}},
                                         {{2, 1, 4}, {1}},
                                         {{}, {}},
                                         {{4}, {0, 1}}}) {
    INFO("target " << shape_str(c.target));
    Tensor out = sum_to(non_contiguous(x), c.target);
    REQUIRE(out.shape() == c.target);
    std::vector<double> want;
    for (const Group& g : groups_of(x, reduced_mask(c.dims, 3))) want.push_back(fold_sum(g));
    check_close(out, want, tolerance(DType::f64));
  }
  CHECK(sum_to(x, x.shape()).is_same(x));
}

TEST_CASE("reduce: sum_to gradcheck") {
  Tensor x = random_f64({2, 3, 4}, 32);
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return sum_to(in[0], {3, 1}); }, {x});
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return sum_to(in[0], {2, 1, 4}); }, {x});
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return sum_to(in[0], {}); }, {x});
}

TEST_CASE("reduce: sum_to rejects shapes x does not broadcast from") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_AS(sum_to(x, {4, 2, 3}), ShapeError);
  CHECK_THROWS_WITH(sum_to(x, {4, 2, 3}), Catch::Contains("sum_to"));
  CHECK_THROWS_AS(sum_to(x, {2, 2}), ShapeError);
  CHECK_THROWS_WITH(sum_to(x, {2, 2}), Catch::Contains("sum_to"));
}

// ---- var and std_dev ----

TEST_CASE("reduce: var matches loops over every dim set and correction") {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (int64_t correction : {0, 1, 2}) {
      auto op = [correction](const Tensor& x, const Dims& d, bool k) {
        return var(x, d, correction, k);
      };
      check_all_dim_sets(op, fold_var(correction), dtype);
    }
  }
}

TEST_CASE("reduce: std_dev matches loops over every dim set") {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (int64_t correction : {0, 1}) {
      auto op = [correction](const Tensor& x, const Dims& d, bool k) {
        return std_dev(x, d, correction, k);
      };
      Fold v = fold_var(correction);
      check_all_dim_sets(
          op, [v](const Group& g) { return std::sqrt(v(g)); }, dtype);
    }
  }
}

TEST_CASE("reduce: var keeps precision for a large offset") {
  // E[x^2] - E[x]^2 would lose every digit here; the two-pass form keeps them.
  Tensor x = add(random_f64({1000}, 41), 1e8);
  std::vector<double> values = x.tolist();
  check_close(var(x), {fold_var(1)(values)}, tolerance(DType::f64));
}

TEST_CASE("reduce: var with too large a correction or no elements") {
  Tensor x = random_f64({3, 2}, 42);
  Tensor two = var(x, {1}, 2);
  for (double v : two.tolist()) CHECK(std::isinf(v));
  for (double v : var(x, {1}, 5).tolist()) CHECK(std::isinf(v));
  Tensor empty_rows = var(zeros({0, 4}, DType::f64), {0});
  CHECK(empty_rows.shape() == Shape{4});
  for (double v : empty_rows.tolist()) CHECK(std::isnan(v));
  CHECK(var(zeros({0, 4}), {1}).shape() == Shape{0});
}

TEST_CASE("reduce: var and std_dev of f16 and bf16") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    Tensor x = tensor({1.0, 2.0, 3.0, 4.0}).to(dtype);
    CHECK(var(x).dtype() == dtype);
    check_close(var(x), {5.0 / 3.0}, tolerance(dtype));
    check_close(std_dev(x, {}, 0), {std::sqrt(1.25)}, tolerance(dtype));
  }
}

TEST_CASE("reduce: var and std_dev gradcheck") {
  Tensor x = random_f64({3, 4, 2}, 43);
  for (const Dims& dims : std::vector<Dims>{{}, {1}, {0, 2}, {-1}}) {
    for (int64_t correction : {0, 1}) {
      for (bool keepdim : {false, true}) {
        CHECK_GRADCHECK(
            [&](const std::vector<Tensor>& in) { return var(in[0], dims, correction, keepdim); },
            {x});
        CHECK_GRADCHECK(
            [&](const std::vector<Tensor>& in) {
              return std_dev(in[0], dims, correction, keepdim);
            },
            {x});
      }
    }
  }
}

TEST_CASE("reduce: std_dev of a constant has a zero gradient") {
  Tensor x = full({2, 3}, 4.0, DType::f64).requires_grad_();
  Tensor s = std_dev(x, {1});
  CHECK(s.tolist() == std::vector<double>{0.0, 0.0});
  sum(s).backward();
  for (double v : x.grad().tolist()) CHECK(v == 0.0);
}

TEST_CASE("reduce: var and std_dev errors name the op") {
  Tensor ints = zeros({2, 3}, DType::i64);
  CHECK_THROWS_AS(var(ints), DTypeError);
  CHECK_THROWS_WITH(var(ints), Catch::Contains("var") && Catch::Contains("i64"));
  CHECK_THROWS_AS(std_dev(ints), DTypeError);
  CHECK_THROWS_WITH(std_dev(ints), Catch::Contains("std_dev"));
  Tensor x = zeros({2, 3});
  CHECK_THROWS_AS(var(x, {2}), IndexError);
  CHECK_THROWS_WITH(var(x, {2}), Catch::Contains("var"));
  CHECK_THROWS_AS(std_dev(x, {0, 0}), IndexError);
  CHECK_THROWS_WITH(std_dev(x, {0, 0}), Catch::Contains("std_dev"));
}

// ---- norm ----

TEST_CASE("reduce: norm matches loops for p = 1, 2, 3, 0.5 and inf") {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (double p : {1.0, 2.0, 3.0, 0.5, std::numeric_limits<double>::infinity()}) {
      INFO("p = " << p);
      auto op = [p](const Tensor& x, const Dims& d, bool k) { return norm(x, p, d, k); };
      check_all_dim_sets(op, fold_norm(p), dtype);
    }
  }
}

TEST_CASE("reduce: norm defaults to the 2-norm of everything") {
  Tensor x = tensor({3.0, -4.0});
  CHECK(norm(x).item<double>() == 5.0);
  CHECK(norm(x).shape() == Shape{});
  CHECK(norm(tensor({{3.0f, 4.0f}}), 2.0, {}, true).shape() == Shape{1, 1});
}

TEST_CASE("reduce: norm of zero-size tensors") {
  Tensor x = zeros({0, 3}, DType::f64);
  CHECK(norm(x, 2.0, {0}).tolist() == std::vector<double>{0, 0, 0});
  CHECK(norm(x, 2.0, {1}).shape() == Shape{0});
  CHECK(norm(x, std::numeric_limits<double>::infinity(), {1}).shape() == Shape{0});
}

TEST_CASE("reduce: norm gradcheck for p = 1, 2, 3, 0.5 and inf") {
  // Values away from 0 keep |x|^(p-1) smooth for p < 1 and p = 1.
  Tensor magnitude = random_f64({3, 4}, 51, 0.2, 1.0);
  Tensor x = mul(magnitude, sign(random_f64({3, 4}, 52)));
  for (double p : {1.0, 2.0, 3.0, 0.5, std::numeric_limits<double>::infinity()}) {
    for (const Dims& dims : std::vector<Dims>{{}, {1}, {0}}) {
      for (bool keepdim : {false, true}) {
        INFO("p = " << p << " dims " << shape_str(dims));
        CHECK_GRADCHECK(
            [&](const std::vector<Tensor>& in) { return norm(in[0], p, dims, keepdim); }, {x});
      }
    }
  }
}

TEST_CASE("reduce: norm of zeros has a zero gradient") {
  for (double p : {2.0, 3.0, std::numeric_limits<double>::infinity()}) {
    Tensor x = zeros({2, 3}, DType::f64).requires_grad_();
    sum(norm(x, p, {1})).backward();
    for (double v : x.grad().tolist()) CHECK(v == 0.0);
  }
}

TEST_CASE("reduce: inf-norm shares the gradient between tied magnitudes") {
  Tensor x = tensor({1.0, -3.0, 3.0, 2.0}).requires_grad_();
  norm(x, std::numeric_limits<double>::infinity()).backward();
  CHECK(x.grad().tolist() == std::vector<double>{0.0, -0.5, 0.5, 0.0});
}

TEST_CASE("reduce: norm errors name the op") {
  CHECK_THROWS_AS(norm(zeros({3}, DType::i32)), DTypeError);
  CHECK_THROWS_WITH(norm(zeros({3}, DType::i32)),
                    Catch::Contains("norm") && Catch::Contains("i32"));
  CHECK_THROWS_AS(norm(zeros({3}), 0.0), ValueError);
  CHECK_THROWS_WITH(norm(zeros({3}), -1.0), Catch::Contains("norm") && Catch::Contains("p > 0"));
  CHECK_THROWS_AS(norm(zeros({3}), 2.0, {1}), IndexError);
  CHECK_THROWS_WITH(norm(zeros({3}), 2.0, {1}), Catch::Contains("norm"));
  CHECK_THROWS_AS(norm(zeros({0}), std::numeric_limits<double>::infinity()), ValueError);
  CHECK_THROWS_WITH(norm(zeros({0}), std::numeric_limits<double>::infinity()),
                    Catch::Contains("norm"));
}

// ---- cumsum ----

namespace {

// The running sum of x along dim, by index arithmetic on the row-major values.
std::vector<double> cumsum_loops(const Tensor& x, int64_t dim) {
  std::vector<double> values = x.tolist(), out(values.size());
  if (x.dim() == 0) return values;
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  const int64_t n = x.shape()[dim];
  for (size_t flat = 0; flat < values.size(); ++flat) {
    int64_t position = (static_cast<int64_t>(flat) / inner) % n;
    double s = 0;
    for (int64_t k = 0; k <= position; ++k) s += values[flat - (position - k) * inner];
    out[flat] = s;
  }
  return out;
}

}  // namespace

TEST_CASE("reduce: cumsum matches loops along every dim, f32 and f64") {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Tensor& x : inputs_345(dtype, 61)) {
      for (int64_t dim : {0, 1, 2, -1}) {
        INFO(dtype_name(dtype) << " dim " << dim);
        Tensor out = cumsum(x, dim);
        REQUIRE(out.shape() == x.shape());
        CHECK(out.dtype() == dtype);
        check_close(out, cumsum_loops(x, dim < 0 ? dim + 3 : dim), tolerance(dtype));
      }
    }
  }
}

TEST_CASE("reduce: cumsum of an input large enough to split across threads") {
  Tensor x = random_f64({40000, 3}, 64).transpose(0, 1);
  Tensor out = cumsum(x, 0);
  check_close(out, cumsum_loops(x, 0), tolerance(DType::f64));
}

TEST_CASE("reduce: cumsum of integers gives i64") {
  Tensor x = randint(-9, 9, {4, 5}, DType::i32);
  Tensor out = cumsum(x, 1);
  CHECK(out.dtype() == DType::i64);
  CHECK(out.tolist() == cumsum_loops(x, 1));
  CHECK(cumsum(tensor({true, true, false, true}), 0).tolist() == std::vector<double>{1, 2, 2, 3});
}

TEST_CASE("reduce: cumsum of 0-dim and zero-size tensors") {
  Tensor s = cumsum(scalar_tensor(3.0, DType::f64), 0);
  CHECK(s.shape() == Shape{});
  CHECK(s.item<double>() == 3.0);
  CHECK(cumsum(zeros({0, 3}), 0).shape() == Shape{0, 3});
  CHECK(cumsum(zeros({3, 0}), 0).shape() == Shape{3, 0});
}

TEST_CASE("reduce: cumsum gradcheck") {
  Tensor x = random_f64({3, 4}, 62);
  for (int64_t dim : {0, 1, -1})
    CHECK_GRADCHECK([dim](const std::vector<Tensor>& in) { return cumsum(in[0], dim); }, {x});
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return cumsum(in[0], 0); },
                  {random_f64({5}, 63)});
}

TEST_CASE("reduce: cumsum backward is the reversed running sum of the gradient") {
  Tensor x = zeros({4}, DType::f64).requires_grad_();
  cumsum(x, 0).backward(tensor({1.0, 2.0, 3.0, 4.0}));
  CHECK(x.grad().tolist() == std::vector<double>{10.0, 9.0, 7.0, 4.0});
}

TEST_CASE("reduce: cumsum errors name the op") {
  CHECK_THROWS_AS(cumsum(zeros({2, 3}), 2), IndexError);
  CHECK_THROWS_WITH(cumsum(zeros({2, 3}), 2), Catch::Contains("cumsum"));
  CHECK_THROWS_AS(cumsum(Tensor(), 0), ValueError);
}
