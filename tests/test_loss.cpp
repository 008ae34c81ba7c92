#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cross_entropy_reference.h"
#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::random_f64;
using kiln::testing::tolerance;

namespace {

// Per-target terms of the nll loss of log-probabilities [N, C, S...] flattened row-major: each
// target t at (n, s) contributes -w[t] * lp[n, t, s] with weight w[t] (0 and 0 when ignored).
struct Terms {
  std::vector<double> loss, weight;
};

Terms reference_nll_terms(const std::vector<double>& lp, int64_t n, int64_t c, int64_t s,
                          const std::vector<double>& targets, const std::vector<double>& w,
                          int64_t ignore_index) {
  Terms terms;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < s; ++j) {
      const int64_t t = static_cast<int64_t>(targets[i * s + j]);
      if (t == ignore_index) {
        terms.loss.push_back(0.0);
        terms.weight.push_back(0.0);
        continue;
      }
      const double wt = w.empty() ? 1.0 : w[t];
      terms.loss.push_back(-wt * lp[(i * c + t) * s + j]);
      terms.weight.push_back(wt);
    }
  }
  return terms;
}

double total(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum;
}

std::vector<double> reduce_as(const std::vector<double>& loss, double weight_sum, Reduction r) {
  if (r == Reduction::none) return loss;
  if (r == Reduction::sum) return {total(loss)};
  return {total(loss) / weight_sum};
}

// log_softmax over dim 1 of a row-major [N, C, S] buffer.
std::vector<double> reference_log_softmax(const std::vector<double>& x, int64_t n, int64_t c,
                                          int64_t s) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < s; ++j) {
      double max = -INFINITY, sum = 0;
      for (int64_t k = 0; k < c; ++k) max = std::max(max, x[(i * c + k) * s + j]);
      for (int64_t k = 0; k < c; ++k) sum += std::exp(x[(i * c + k) * s + j] - max);
      for (int64_t k = 0; k < c; ++k)
        out[(i * c + k) * s + j] = x[(i * c + k) * s + j] - max - std::log(sum);
    }
  }
  return out;
}

// torch.nn.functional.cross_entropy with class-index targets, written out:
// (1 - eps) * nll + eps / C * smooth, smooth = -sum_c w_c lp_c per non-ignored target.
std::vector<double> reference_cross_entropy(const std::vector<double>& logits, int64_t n, int64_t c,
                                            int64_t s, const std::vector<double>& targets,
                                            const std::vector<double>& w, int64_t ignore_index,
                                            Reduction r, double eps) {
  std::vector<double> lp = reference_log_softmax(logits, n, c, s);
  Terms nll = reference_nll_terms(lp, n, c, s, targets, w, ignore_index);
  std::vector<double> smooth(n * s, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < s; ++j) {
      if (static_cast<int64_t>(targets[i * s + j]) == ignore_index) continue;
      for (int64_t k = 0; k < c; ++k)
        smooth[i * s + j] -= (w.empty() ? 1.0 : w[k]) * lp[(i * c + k) * s + j];
    }
  }
  const double weight_sum = total(nll.weight);
  std::vector<double> a = reduce_as(nll.loss, weight_sum, r);
  std::vector<double> b = reduce_as(smooth, weight_sum, r);
  for (size_t i = 0; i < a.size(); ++i) a[i] = (1 - eps) * a[i] + eps / c * b[i];
  return a;
}

Tensor random_targets(const Shape& shape, int64_t classes, uint64_t seed) {
  Generator gen(seed);
  return randint(0, classes, shape, DType::i64, Device::cpu(), &gen);
}

Tensor long_tensor(const std::vector<int64_t>& values, const Shape& shape = {}) {
  return tensor(values, shape);
}

const Reduction kReductions[] = {Reduction::none, Reduction::mean, Reduction::sum};

}  // namespace

// ---- numbers checked by hand ----

TEST_CASE("loss: cross_entropy of a tiny case checked by hand") {
  Tensor logits = tensor<double>({{1.0, 2.0, 3.0}});
  Tensor target = long_tensor({2});
  // log(e^1 + e^2 + e^3) - 3
  CHECK(cross_entropy(logits, target).item<double>() == Approx(0.40760596444).epsilon(1e-10));
  CHECK(cross_entropy(logits.to(DType::f32), target).item<double>() ==
        Approx(0.40760596).epsilon(1e-6));
  // lp = [-2.4076, -1.4076, -0.4076]; smooth = (2.4076 + 1.4076 + 0.4076) / 3 = 1.4076,
  // loss = 0.9 * 0.4076 + 0.1 * 1.4076.
  CHECK(cross_entropy(logits, target, Tensor(), -100, Reduction::mean, 0.1).item<double>() ==
        Approx(0.50760596444).epsilon(1e-10));
}

TEST_CASE("loss: nll_loss of a tiny case checked by hand") {
  Tensor lp = tensor<double>({{-1.0, -2.0}, {-0.5, -3.0}, {-4.0, -0.25}});
  Tensor target = long_tensor({1, 0, 1});
  check_close(nll_loss(lp, target, Tensor(), -100, Reduction::none), {2.0, 0.5, 0.25},
              tolerance(DType::f64));
  CHECK(nll_loss(lp, target, Tensor(), -100, Reduction::sum).item<double>() == 2.75);
  CHECK(nll_loss(lp, target).item<double>() == Approx(2.75 / 3));
  // Weights [2, 1]: (1*2 + 2*0.5 + 1*0.25) / (1 + 2 + 1)
  Tensor w = tensor<double>({2.0, 1.0});
  CHECK(nll_loss(lp, target, w).item<double>() == Approx(3.25 / 4));
  // Ignoring class 1 leaves only the middle sample: 2 * 0.5 / 2
  CHECK(nll_loss(lp, target, w, 1).item<double>() == Approx(0.5));
}

// ---- nll_loss against the reference ----

TEST_CASE("loss: nll_loss [N, C] matches the reference for every reduction") {
  Tensor lp = log_softmax(random_f64({7, 5}, 1, -3.0, 3.0), 1);
  Tensor target = random_targets({7}, 5, 2);
  Terms terms = reference_nll_terms(lp.tolist(), 7, 5, 1, target.tolist(), {}, -100);
  for (Reduction r : kReductions) {
    Tensor out = nll_loss(lp, target, Tensor(), -100, r);
    CHECK(out.shape() == (r == Reduction::none ? Shape{7} : Shape{}));
    check_close(out, reduce_as(terms.loss, total(terms.weight), r), tolerance(DType::f64));
  }
}

TEST_CASE("loss: nll_loss with class weights uses the weighted mean") {
  Tensor lp = log_softmax(random_f64({9, 4}, 3, -3.0, 3.0), 1);
  Tensor target = random_targets({9}, 4, 4);
  Tensor w = random_f64({4}, 5, 0.1, 2.0);
  Terms terms = reference_nll_terms(lp.tolist(), 9, 4, 1, target.tolist(), w.tolist(), -100);
  for (Reduction r : kReductions)
    check_close(nll_loss(lp, target, w, -100, r), reduce_as(terms.loss, total(terms.weight), r),
                tolerance(DType::f64));
}

TEST_CASE("loss: nll_loss skips ignore_index in the sum and in the mean's denominator") {
  Tensor lp = log_softmax(random_f64({6, 3}, 6), 1);
  Tensor target = long_tensor({0, -100, 2, 1, -100, 2});
  Tensor w = tensor<double>({0.5, 1.5, 3.0});
  std::vector<double> t = target.tolist();
  for (Reduction r : kReductions) {
    Terms plain = reference_nll_terms(lp.tolist(), 6, 3, 1, t, {}, -100);
    check_close(nll_loss(lp, target, Tensor(), -100, r),
                reduce_as(plain.loss, total(plain.weight), r), tolerance(DType::f64));
    Terms weighted = reference_nll_terms(lp.tolist(), 6, 3, 1, t, w.tolist(), -100);
    check_close(nll_loss(lp, target, w, -100, r),
                reduce_as(weighted.loss, total(weighted.weight), r), tolerance(DType::f64));
  }
  // An ignore_index that is a valid class drops that class.
  Terms no_twos = reference_nll_terms(lp.tolist(), 6, 3, 1, {0, 1, 2, 1, 0, 2}, {}, 2);
  check_close(nll_loss(lp, long_tensor({0, 1, 2, 1, 0, 2}), Tensor(), 2),
              {total(no_twos.loss) / 4.0}, tolerance(DType::f64));
}

TEST_CASE("loss: nll_loss mean over only ignored targets is nan, as PyTorch") {
  Tensor lp = log_softmax(random_f64({2, 3}, 7), 1);
  Tensor target = long_tensor({-100, -100});
  CHECK(std::isnan(nll_loss(lp, target).item<double>()));
  CHECK(nll_loss(lp, target, Tensor(), -100, Reduction::sum).item<double>() == 0.0);
}

TEST_CASE("loss: nll_loss over [N, C, H, W] matches the reference") {
  Tensor lp = log_softmax(random_f64({2, 3, 4, 5}, 8, -2.0, 2.0), 1);
  Tensor target = random_targets({2, 4, 5}, 3, 9);
  Tensor w = random_f64({3}, 10, 0.5, 1.5);
  Terms terms = reference_nll_terms(lp.tolist(), 2, 3, 20, target.tolist(), w.tolist(), -100);
  for (Reduction r : kReductions) {
    Tensor out = nll_loss(lp, target, w, -100, r);
    if (r == Reduction::none) CHECK(out.shape() == Shape{2, 4, 5});
    check_close(out, reduce_as(terms.loss, total(terms.weight), r), tolerance(DType::f64));
  }
}

TEST_CASE("loss: nll_loss in f32, with i32 targets and non-contiguous inputs") {
  Tensor lp64 = log_softmax(random_f64({5, 4}, 11), 1);
  Tensor target = random_targets({5}, 4, 12);
  Terms terms = reference_nll_terms(lp64.tolist(), 5, 4, 1, target.tolist(), {}, -100);
  Tensor out = nll_loss(lp64.to(DType::f32), target.to(DType::i32));
  CHECK(out.dtype() == DType::f32);
  check_close(out, {total(terms.loss) / 5}, tolerance(DType::f32));

  Tensor transposed = lp64.t().contiguous().t();
  REQUIRE_FALSE(transposed.is_contiguous());
  check_close(nll_loss(transposed, target, Tensor(), -100, Reduction::none), terms.loss,
              tolerance(DType::f64));
  Tensor strided_target = random_targets({10}, 4, 13).slice(0, 0, 10, 2);
  Terms strided = reference_nll_terms(lp64.tolist(), 5, 4, 1, strided_target.tolist(), {}, -100);
  check_close(nll_loss(lp64, strided_target, Tensor(), -100, Reduction::sum), {total(strided.loss)},
              tolerance(DType::f64));
}

TEST_CASE("loss: nll_loss of an unbatched [C] input and of an empty batch") {
  Tensor lp = tensor<double>({-0.1, -2.0, -3.5});
  Tensor target = long_tensor({2}).reshape({});
  Tensor out = nll_loss(lp, target, Tensor(), -100, Reduction::none);
  CHECK(out.dim() == 0);
  CHECK(out.item<double>() == 3.5);
  CHECK(nll_loss(lp, target).item<double>() == 3.5);

  Tensor empty_lp = zeros({0, 3}, DType::f64);
  Tensor empty_target = zeros({0}, DType::i64);
  CHECK(nll_loss(empty_lp, empty_target, Tensor(), -100, Reduction::none).shape() == Shape{0});
  CHECK(nll_loss(empty_lp, empty_target, Tensor(), -100, Reduction::sum).item<double>() == 0.0);
}

TEST_CASE("loss: nll_loss backward puts -w[t] / total weight at the targets") {
  Tensor lp = log_softmax(random_f64({3, 4}, 14), 1).detach();
  lp.requires_grad_();
  Tensor target = long_tensor({3, -100, 1});
  Tensor w = tensor<double>({1.0, 2.0, 3.0, 4.0});
  nll_loss(lp, target, w).backward();
  std::vector<double> expected(12, 0.0);
  expected[0 * 4 + 3] = -4.0 / 6.0;
  expected[2 * 4 + 1] = -2.0 / 6.0;
  check_close(lp.grad(), expected, tolerance(DType::f64));
}

TEST_CASE("loss: nll_loss gradcheck for each reduction") {
  Tensor target = long_tensor({1, 0, 2, -100, 2});
  Tensor w = random_f64({3}, 15, 0.5, 2.0);
  for (Reduction r : kReductions) {
    CHECK_GRADCHECK(
        [&](const std::vector<Tensor>& in) { return nll_loss(in[0], in[1], Tensor(), -100, r); },
        {random_f64({5, 3}, 16), target});
    CHECK_GRADCHECK(
        [&](const std::vector<Tensor>& in) { return nll_loss(in[0], in[1], w, -100, r); },
        {random_f64({5, 3}, 17), target});
  }
}

TEST_CASE("loss: nll_loss gradcheck over [N, C, H, W]") {
  Tensor target = random_targets({2, 3, 2}, 4, 18);
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return nll_loss(in[0], in[1], Tensor(), 0, Reduction::mean);
      },
      {random_f64({2, 4, 3, 2}, 19), target});
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return nll_loss(in[0], in[1], Tensor(), -100, Reduction::none);
      },
      {random_f64({2, 4, 3, 2}, 20), target});
}

// ---- cross_entropy ----

TEST_CASE("loss: cross_entropy matches log_softmax + nll in the reference") {
  Tensor logits = random_f64({6, 5}, 21, -4.0, 4.0);
  Tensor target = random_targets({6}, 5, 22);
  for (Reduction r : kReductions) {
    check_close(
        cross_entropy(logits, target, Tensor(), -100, r),
        reference_cross_entropy(logits.tolist(), 6, 5, 1, target.tolist(), {}, -100, r, 0.0),
        tolerance(DType::f64));
  }
}

TEST_CASE("loss: cross_entropy matches PyTorch's values, smoothing 0 to 1, weights, ignore_index") {
  kiln::testing::check_cross_entropy_against_torch(Device::cpu(), DType::f64);
  kiln::testing::check_cross_entropy_against_torch(Device::cpu(), DType::f32);
}

TEST_CASE("loss: cross_entropy label smoothing, weights and ignore_index") {
  Tensor logits = random_f64({8, 4}, 23, -3.0, 3.0);
  Tensor target = long_tensor({0, 3, -100, 2, 1, 1, -100, 3});
  Tensor w = random_f64({4}, 24, 0.2, 2.0);
  for (Reduction r : kReductions) {
    for (double eps : {0.0, 0.1, 0.5, 1.0}) {
      INFO("reduction " << static_cast<int>(r) << " eps " << eps);
      check_close(
          cross_entropy(logits, target, Tensor(), -100, r, eps),
          reference_cross_entropy(logits.tolist(), 8, 4, 1, target.tolist(), {}, -100, r, eps),
          tolerance(DType::f64));
      check_close(cross_entropy(logits, target, w, -100, r, eps),
                  reference_cross_entropy(logits.tolist(), 8, 4, 1, target.tolist(), w.tolist(),
                                          -100, r, eps),
                  tolerance(DType::f64));
    }
  }
}

TEST_CASE("loss: cross_entropy over [N, C, H, W] with smoothing") {
  Tensor logits = random_f64({2, 3, 4, 4}, 25, -3.0, 3.0);
  Tensor target = random_targets({2, 4, 4}, 3, 26);
  Tensor w = random_f64({3}, 27, 0.5, 1.5);
  for (Reduction r : kReductions) {
    Tensor out = cross_entropy(logits, target, w, 1, r, 0.2);
    if (r == Reduction::none) CHECK(out.shape() == Shape{2, 4, 4});
    check_close(
        out,
        reference_cross_entropy(logits.tolist(), 2, 3, 16, target.tolist(), w.tolist(), 1, r, 0.2),
        tolerance(DType::f64));
  }
}

TEST_CASE("loss: cross_entropy in f32 and on non-contiguous logits") {
  Tensor logits = random_f64({5, 6}, 28, -3.0, 3.0);
  Tensor target = random_targets({5}, 6, 29);
  std::vector<double> want = reference_cross_entropy(logits.tolist(), 5, 6, 1, target.tolist(), {},
                                                     -100, Reduction::none, 0.3);
  Tensor out = cross_entropy(logits.to(DType::f32), target, Tensor(), -100, Reduction::none, 0.3);
  CHECK(out.dtype() == DType::f32);
  check_close(out, want, tolerance(DType::f32));
  Tensor transposed = logits.t().contiguous().t();
  REQUIRE_FALSE(transposed.is_contiguous());
  check_close(cross_entropy(transposed, target, Tensor(), -100, Reduction::none, 0.3), want,
              tolerance(DType::f64));
}

TEST_CASE("loss: cross_entropy of large logits stays finite") {
  Tensor logits = tensor<double>({{1000.0, 0.0, -1000.0}, {0.0, 1000.0, 0.0}});
  check_close(cross_entropy(logits, long_tensor({0, 0}), Tensor(), -100, Reduction::none),
              {0.0, 1000.0}, tolerance(DType::f64));
  for (double v : cross_entropy(logits.to(DType::f32), long_tensor({2, 1}), Tensor(), -100,
                                Reduction::none, 0.1)
                      .tolist())
    CHECK(std::isfinite(v));
  Tensor leaf = logits.to(DType::f32).detach();
  leaf.requires_grad_();
  cross_entropy(leaf, long_tensor({2, 1})).backward();
  for (double g : leaf.grad().tolist()) CHECK(std::isfinite(g));
}

TEST_CASE("loss: cross_entropy of an unbatched [C] input") {
  Tensor logits = tensor<double>({1.0, 2.0, 3.0});
  Tensor target = long_tensor({2}).reshape({});
  Tensor out = cross_entropy(logits, target, Tensor(), -100, Reduction::none, 0.1);
  CHECK(out.dim() == 0);
  CHECK(out.item<double>() == Approx(0.50760596444).epsilon(1e-10));
}

TEST_CASE("loss: cross_entropy gradcheck for each reduction with smoothing and weights") {
  Tensor target = long_tensor({1, 0, 3, -100, 2});
  Tensor w = random_f64({4}, 30, 0.5, 2.0);
  for (Reduction r : kReductions) {
    INFO("reduction " << static_cast<int>(r));
    CHECK_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          return cross_entropy(in[0], in[1], Tensor(), -100, r);
        },
        {random_f64({5, 4}, 31, -2.0, 2.0), target});
    CHECK_GRADCHECK(
        [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], w, -100, r, 0.2); },
        {random_f64({5, 4}, 32, -2.0, 2.0), target});
  }
}

TEST_CASE("loss: cross_entropy gradcheck over [N, C, H, W]") {
  Tensor target = random_targets({2, 3, 3}, 3, 33);
  Tensor w = random_f64({3}, 34, 0.5, 2.0);
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return cross_entropy(in[0], in[1], w, 0, Reduction::mean, 0.1);
      },
      {random_f64({2, 3, 3, 3}, 35, -2.0, 2.0), target});
}

// ---- mse_loss ----

TEST_CASE("loss: mse_loss matches the reference for every reduction") {
  Tensor a = random_f64({4, 5}, 36), b = random_f64({4, 5}, 37);
  std::vector<double> va = a.tolist(), vb = b.tolist(), sq;
  for (size_t i = 0; i < va.size(); ++i) sq.push_back((va[i] - vb[i]) * (va[i] - vb[i]));
  check_close(mse_loss(a, b, Reduction::none), sq, tolerance(DType::f64));
  check_close(mse_loss(a, b, Reduction::sum), {total(sq)}, tolerance(DType::f64));
  check_close(mse_loss(a, b), {total(sq) / 20}, tolerance(DType::f64));
  CHECK(mse_loss(a, b).dim() == 0);
  check_close(mse_loss(a.to(DType::f32), b.to(DType::f32)), {total(sq) / 20},
              tolerance(DType::f32));
  check_close(mse_loss(a.t(), b.t(), Reduction::sum), {total(sq)}, tolerance(DType::f64));
}

TEST_CASE("loss: mse_loss of empty inputs") {
  Tensor e = zeros({0, 3}, DType::f64);
  CHECK(mse_loss(e, e, Reduction::none).shape() == Shape{0, 3});
  CHECK(mse_loss(e, e, Reduction::sum).item<double>() == 0.0);
  CHECK(std::isnan(mse_loss(e, e).item<double>()));
}

TEST_CASE("loss: mse_loss gradcheck in both inputs") {
  for (Reduction r : kReductions) {
    CHECK_GRADCHECK([r](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], r); },
                    {random_f64({3, 4}, 38), random_f64({3, 4}, 39)});
  }
}

// ---- errors ----

TEST_CASE("loss: non-integer targets are a DTypeError") {
  Tensor lp = zeros({2, 3}, DType::f64);
  Tensor float_target = zeros({2}, DType::f32);
  CHECK_THROWS_AS(nll_loss(lp, float_target), DTypeError);
  CHECK_THROWS_WITH(nll_loss(lp, float_target),
                    Catch::Contains("nll_loss") && Catch::Contains("target"));
  CHECK_THROWS_AS(cross_entropy(lp, float_target), DTypeError);
  CHECK_THROWS_WITH(cross_entropy(lp, float_target), Catch::Contains("cross_entropy"));
  CHECK_THROWS_AS(nll_loss(zeros({2, 3}, DType::i64), long_tensor({0, 1})), DTypeError);
}

TEST_CASE("loss: target shape mismatch is a ShapeError naming both shapes") {
  Tensor lp = zeros({2, 3, 4}, DType::f64);
  Tensor target = zeros({2, 3}, DType::i64);
  CHECK_THROWS_AS(nll_loss(lp, target), ShapeError);
  CHECK_THROWS_WITH(nll_loss(lp, target),
                    Catch::Contains("nll_loss") && Catch::Contains("[2, 3, 4]") &&
                        Catch::Contains("[2, 3]") && Catch::Contains("[2, 4]"));
  CHECK_THROWS_AS(cross_entropy(zeros({2, 3}), zeros({3}, DType::i64)), ShapeError);
  CHECK_THROWS_WITH(cross_entropy(zeros({2, 3}), zeros({3}, DType::i64)),
                    Catch::Contains("cross_entropy"));
  CHECK_THROWS_AS(nll_loss(scalar_tensor(1.0), zeros({}, DType::i64)), ShapeError);
}

TEST_CASE("loss: class index out of range is an IndexError naming the value and C") {
  Tensor lp = zeros({3, 4}, DType::f64);
  CHECK_THROWS_AS(nll_loss(lp, long_tensor({0, 4, 1})), IndexError);
  CHECK_THROWS_WITH(nll_loss(lp, long_tensor({0, 7, 1})), Catch::Contains("nll_loss") &&
                                                              Catch::Contains("target 7") &&
                                                              Catch::Contains("4 classes"));
  CHECK_THROWS_WITH(cross_entropy(lp, long_tensor({0, 1, -1})),
                    Catch::Contains("cross_entropy") && Catch::Contains("target -1"));
  // -100 is only skipped while it is the ignore_index.
  CHECK_NOTHROW(nll_loss(lp, long_tensor({0, -100, 1})));
  CHECK_THROWS_AS(nll_loss(lp, long_tensor({0, -100, 1}), Tensor(), 0), IndexError);
}

TEST_CASE("loss: weight of the wrong size is a ShapeError") {
  Tensor lp = zeros({2, 3}, DType::f64);
  Tensor target = long_tensor({0, 1});
  CHECK_THROWS_AS(nll_loss(lp, target, zeros({4}, DType::f64)), ShapeError);
  CHECK_THROWS_WITH(nll_loss(lp, target, zeros({4}, DType::f64)), Catch::Contains("nll_loss") &&
                                                                      Catch::Contains("[3]") &&
                                                                      Catch::Contains("[4]"));
  CHECK_THROWS_AS(cross_entropy(lp, target, zeros({1, 3}, DType::f64)), ShapeError);
  CHECK_THROWS_AS(cross_entropy(lp, target, long_tensor({1, 1, 1})), DTypeError);
}

TEST_CASE("loss: label_smoothing outside [0, 1] is a ValueError") {
  Tensor logits = zeros({2, 3});
  Tensor target = long_tensor({0, 1});
  CHECK_THROWS_AS(cross_entropy(logits, target, Tensor(), -100, Reduction::mean, 1.5), ValueError);
  CHECK_THROWS_WITH(cross_entropy(logits, target, Tensor(), -100, Reduction::mean, -0.1),
                    Catch::Contains("cross_entropy") && Catch::Contains("label_smoothing"));
}

TEST_CASE("loss: mse_loss shape mismatch is a ShapeError, not a broadcast") {
  Tensor a = zeros({4, 1}), b = zeros({4});
  CHECK_THROWS_AS(mse_loss(a, b), ShapeError);
  CHECK_THROWS_WITH(mse_loss(a, b), Catch::Contains("mse_loss") && Catch::Contains("[4, 1]") &&
                                        Catch::Contains("[4]"));
  CHECK_THROWS_AS(mse_loss(zeros({3}, DType::i64), zeros({3}, DType::i64)), DTypeError);
  CHECK_THROWS_AS(mse_loss(Tensor(), b), ValueError);
}
