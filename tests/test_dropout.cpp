// dropout: the mask is the Philox rule element by element, seeded runs repeat, the kept fraction
// is about 1 - p, the backward uses the same mask, and bad probabilities are rejected.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gradcheck.h"
#include "kiln/core/philox.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using testing::check_close;
using testing::random_f64;
using testing::tolerance;

TEST_CASE("dropout: element i is kept iff philox_uniform(seed, offset, i) >= p") {
  // 63 elements, and 10001, which the threads split at places that are no multiple of 4 (the
  // kernel draws a Philox block once for its 4 elements).
  for (const Shape& shape : {Shape{7, 9}, Shape{73, 137}}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      for (double p : {0.2, 0.5, 0.9}) {
        INFO(shape_str(shape) << " " << dtype_name(dtype) << " p " << p);
        Generator gen(42);
        gen.next_offset();  // a generator that has already served another op
        uint64_t offset = gen.state().offset;
        Tensor x = random_f64(shape, 1, 0.5, 1.5).to(dtype);
        Tensor y = dropout(x, p, true, &gen);
        CHECK(y.dtype() == dtype);
        CHECK(gen.state().offset > offset);
        std::vector<double> xs = x.tolist(), want;
        const double scale = static_cast<double>(convert<float>(1.0 / (1.0 - p)));
        for (size_t i = 0; i < xs.size(); ++i) {
          bool kept = philox_uniform(42, offset, i) >= p;
          want.push_back(kept ? xs[i] * (dtype == DType::f64 ? 1.0 / (1.0 - p) : scale) : 0.0);
        }
        check_close(y, want, tolerance(dtype));
      }
    }
  }
}

TEST_CASE("dropout: the mask follows the logical order of non-contiguous inputs") {
  Tensor base = random_f64({6, 8}, 2, 0.5, 1.5);
  for (const Tensor& x : {base.t(), base.slice(1, 0, 8, 3), random_f64({1, 5}, 3).expand({4, 5})}) {
    INFO(shape_str(x.shape()));
    Generator gen(7);
    Tensor y = dropout(x, 0.5, true, &gen);
    CHECK(y.shape() == x.shape());
    std::vector<double> xs = x.tolist(), ys = y.tolist();
    for (size_t i = 0; i < xs.size(); ++i) {
      bool kept = philox_uniform(7, 0, i) >= 0.5;
      CHECK(ys[i] == (kept ? xs[i] * 2.0 : 0.0));
    }
  }
}

TEST_CASE("dropout: the same seed gives the same mask, the next call a new one") {
  Tensor x = ones({1000}, DType::f64);
  Generator a(123), b(123), c(124);
  Tensor ya = dropout(x, 0.5, true, &a);
  CHECK(ya.tolist() == dropout(x, 0.5, true, &b).tolist());
  CHECK(ya.tolist() != dropout(x, 0.5, true, &c).tolist());
  CHECK(ya.tolist() != dropout(x, 0.5, true, &a).tolist());
  manual_seed(99);
  Tensor first = dropout(x, 0.5);
  manual_seed(99);
  CHECK(first.tolist() == dropout(x, 0.5).tolist());
}

TEST_CASE("dropout: about 1 - p of 1e5 elements survive") {
  for (double p : {0.1, 0.5, 0.8}) {
    Generator gen(2024);
    Tensor y = dropout(ones({100000}), p, true, &gen);
    double kept = 0;
    for (double v : y.tolist()) {
      if (v != 0.0) {
        ++kept;
        CHECK(v == Approx(1.0 / (1.0 - p)));
      }
    }
    // The binomial standard deviation is at most 0.0016; 0.01 is over six of them.
    CHECK(std::abs(kept / 1e5 - (1.0 - p)) < 0.01);
  }
}

TEST_CASE("dropout: p of 0 keeps everything, p of 1 drops everything") {
  Tensor x = random_f64({50}, 4);
  Generator gen(5);
  CHECK(dropout(x, 0.0, true, &gen).tolist() == x.tolist());
  Tensor leaf = x.clone().requires_grad_();
  Tensor y = dropout(leaf, 1.0, true, &gen);
  for (double v : y.tolist()) CHECK(v == 0.0);
  sum(y).backward();
  for (double v : leaf.grad().tolist()) CHECK(v == 0.0);
}

TEST_CASE("dropout: not training returns the input itself") {
  Tensor x = random_f64({3, 4}, 6).requires_grad_();
  Generator gen(8);
  Tensor y = dropout(x, 0.5, false, &gen);
  CHECK(y.is_same(x));
  CHECK(gen.state().offset == 0);
}

TEST_CASE("dropout: 16-bit floats and empty tensors") {
  Generator gen(9);
  Tensor y = dropout(ones({64}, DType::bf16), 0.5, true, &gen);
  CHECK(y.dtype() == DType::bf16);
  for (double v : y.tolist()) CHECK((v == 0.0 || v == 2.0));
  CHECK(dropout(zeros({0, 3}), 0.5, true, &gen).shape() == Shape{0, 3});
}

TEST_CASE("dropout: backward multiplies by the same scaled mask") {
  Tensor x = random_f64({5, 6}, 10, 0.5, 1.5).requires_grad_();
  Generator gen(11);
  Tensor y = dropout(x, 0.3, true, &gen);
  CHECK(y.grad_fn()->name() == "DropoutBackward");
  sum(mul(y, 2.0)).backward();
  std::vector<double> xs = x.detach().tolist(), ys = y.detach().tolist(), want;
  for (size_t i = 0; i < xs.size(); ++i) want.push_back(2.0 * ys[i] / xs[i]);
  check_close(x.grad(), want, tolerance(DType::f64));
}

TEST_CASE("dropout: gradcheck with a fixed mask") {
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        Generator gen(12);  // a fresh generator per call, so every evaluation drops the same set
        return dropout(in[0], 0.4, true, &gen);
      },
      {random_f64({4, 5}, 13)});
}

TEST_CASE("dropout: errors") {
  Tensor x = ones({4});
  CHECK_THROWS_AS(dropout(x, -0.1), ValueError);
  CHECK_THROWS_WITH(dropout(x, 1.5), Catch::Contains("dropout") && Catch::Contains("1.5"));
  CHECK_THROWS_AS(dropout(x, std::nan("")), ValueError);
  CHECK_THROWS_AS(dropout(ones({4}, DType::i64), 0.5), DTypeError);
  CHECK_THROWS_WITH(dropout(ones({4}, DType::i64), 0.5), Catch::Contains("dropout"));
  CHECK_THROWS_AS(dropout(Tensor(), 0.5), ValueError);
}
