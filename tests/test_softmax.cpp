#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::non_contiguous;
using kiln::testing::random_f64;
using kiln::testing::tolerance;

namespace {

// Softmax (or log_softmax) of a row-major tensor along `dim`, one line of `size` at a time.
std::vector<double> reference_softmax(const Tensor& x, int64_t dim, bool log) {
  std::vector<double> v = x.tolist(), out(v.size());
  const Shape& shape = x.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= shape[d];
  const int64_t size = shape[dim];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * size + k) * inner + i; };
      double max = -INFINITY;
      for (int64_t k = 0; k < size; ++k) max = std::max(max, v[at(k)]);
      double sum = 0;
      for (int64_t k = 0; k < size; ++k) sum += std::exp(v[at(k)] - max);
      for (int64_t k = 0; k < size; ++k)
        out[at(k)] = log ? v[at(k)] - max - std::log(sum) : std::exp(v[at(k)] - max) / sum;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("softmax: matches a plain loop along every dim, f64") {
  Tensor x = random_f64({3, 4, 5}, 1, -3.0, 3.0);
  for (int64_t dim = 0; dim < 3; ++dim) {
    INFO("dim " << dim);
    check_close(softmax(x, dim), reference_softmax(x, dim, false), tolerance(DType::f64));
    check_close(log_softmax(x, dim), reference_softmax(x, dim, true), tolerance(DType::f64));
  }
}

TEST_CASE("softmax: negative dims count from the end") {
  Tensor x = random_f64({2, 3, 4}, 2);
  CHECK(allclose(softmax(x, -1), softmax(x, 2)));
  CHECK(allclose(log_softmax(x, -3), log_softmax(x, 0)));
}

TEST_CASE("softmax: matches a plain loop in f32") {
  Tensor x = random_f64({4, 7, 3}, 3, -5.0, 5.0).to(DType::f32);
  for (int64_t dim = 0; dim < 3; ++dim) {
    INFO("dim " << dim);
    Tensor y = softmax(x, dim), ly = log_softmax(x, dim);
    CHECK(y.dtype() == DType::f32);
    CHECK(ly.dtype() == DType::f32);
    check_close(y, reference_softmax(x, dim, false), tolerance(DType::f32));
    check_close(ly, reference_softmax(x, dim, true), tolerance(DType::f32));
  }
}

TEST_CASE("softmax: wide inner dims span several column blocks") {
  // 300 columns after the softmax dim: more than one block of the strided kernel.
  Tensor x = random_f64({2, 5, 300}, 4, -4.0, 4.0);
  check_close(softmax(x, 1), reference_softmax(x, 1, false), tolerance(DType::f64));
  check_close(log_softmax(x, 0), reference_softmax(x, 0, true), tolerance(DType::f64));
}

TEST_CASE("softmax: rows sum to one") {
  Tensor x = random_f64({6, 9}, 5, -10.0, 10.0);
  check_close(sum(softmax(x, 1), {1}), ones({6}, DType::f64), tolerance(DType::f64));
  check_close(sum(exp(log_softmax(x, 0)), {0}), ones({9}, DType::f64), tolerance(DType::f64));
}

TEST_CASE("softmax: non-contiguous inputs") {
  Tensor base = random_f64({5, 6}, 6, -2.0, 2.0);
  Tensor transposed = base.t();
  check_close(softmax(transposed, 1), reference_softmax(transposed.contiguous(), 1, false),
              tolerance(DType::f64));
  check_close(log_softmax(transposed, 0), reference_softmax(transposed.contiguous(), 0, true),
              tolerance(DType::f64));

  Tensor sliced = base.slice(1, 0, 6, 2);
  check_close(softmax(sliced, 1), reference_softmax(sliced.contiguous(), 1, false),
              tolerance(DType::f64));

  Tensor expanded = random_f64({1, 4}, 7).expand({3, 4});
  check_close(log_softmax(expanded, 1), reference_softmax(expanded.contiguous(), 1, true),
              tolerance(DType::f64));
  check_close(softmax(expanded, 0), std::vector<double>(12, 1.0 / 3.0), tolerance(DType::f64));

  Tensor strided = non_contiguous(random_f64({3, 4}, 8));
  check_close(softmax(strided, 1), reference_softmax(strided.contiguous(), 1, false),
              tolerance(DType::f64));
}

TEST_CASE("softmax: large logits stay finite") {
  Tensor x = tensor<double>({{1000.0, 1000.0, 0.0}, {-1000.0, 0.0, 1000.0}});
  check_close(softmax(x, 1), {0.5, 0.5, 0.0, 0.0, 0.0, 1.0}, tolerance(DType::f64));
  std::vector<double> ly = log_softmax(x, 1).tolist();
  CHECK(ly[0] == Approx(-std::log(2.0)));
  CHECK(ly[2] == Approx(-1000.0 - std::log(2.0)));
  CHECK(ly[3] == Approx(-2000.0));
  CHECK(ly[5] == Approx(0.0).margin(1e-12));
  for (double v : log_softmax(x.to(DType::f32), 1).tolist()) CHECK(std::isfinite(v));
}

TEST_CASE("softmax: -inf entries get zero probability") {
  Tensor x = tensor<double>({-INFINITY, 0.0, 0.0});
  check_close(softmax(x, 0), {0.0, 0.5, 0.5}, tolerance(DType::f64));
  std::vector<double> ly = log_softmax(x, 0).tolist();
  CHECK(ly[0] == -INFINITY);
  CHECK(ly[1] == Approx(-std::log(2.0)));
}

TEST_CASE("softmax: f16 and bf16 compute in f32 and keep their dtype") {
  Tensor x = random_f64({3, 8}, 9, -4.0, 4.0);
  for (DType dtype : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    Tensor low = x.to(dtype);
    Tensor y = softmax(low, 1), ly = log_softmax(low, 1);
    CHECK(y.dtype() == dtype);
    CHECK(ly.dtype() == dtype);
    // The reference sees the rounded inputs, so only the output rounding differs.
    check_close(y, reference_softmax(low, 1, false), tolerance(dtype));
    check_close(ly, reference_softmax(low, 1, true), tolerance(dtype));
  }
}

TEST_CASE("softmax: zero-size and 0-dim inputs") {
  Tensor empty_rows = zeros({0, 3}, DType::f64);
  CHECK(softmax(empty_rows, 1).shape() == Shape{0, 3});
  CHECK(log_softmax(empty_rows, 0).shape() == Shape{0, 3});
  Tensor empty_cols = zeros({2, 0}, DType::f32);
  CHECK(softmax(empty_cols, 1).shape() == Shape{2, 0});

  Tensor scalar = scalar_tensor(3.5, DType::f64);
  CHECK(softmax(scalar, 0).item<double>() == 1.0);
  CHECK(log_softmax(scalar, -1).item<double>() == 0.0);
  CHECK(softmax(scalar, 0).dim() == 0);
}

TEST_CASE("softmax: gradcheck along each dim") {
  for (int64_t dim = 0; dim < 3; ++dim) {
    INFO("dim " << dim);
    CHECK_GRADCHECK([dim](const std::vector<Tensor>& in) { return softmax(in[0], dim); },
                    {random_f64({2, 3, 4}, 10 + dim, -2.0, 2.0)});
  }
}

TEST_CASE("softmax: log_softmax gradcheck along each dim") {
  for (int64_t dim = 0; dim < 3; ++dim) {
    INFO("dim " << dim);
    CHECK_GRADCHECK([dim](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); },
                    {random_f64({2, 3, 4}, 20 + dim, -2.0, 2.0)});
  }
}

TEST_CASE("softmax: gradcheck through a non-contiguous view") {
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return softmax(in[0].t(), 1); },
                  {random_f64({4, 3}, 30)});
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return log_softmax(in[0].t(), 0); },
                  {random_f64({4, 3}, 31)});
}

TEST_CASE("softmax: gradcheck when the output feeds back into its input") {
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return mul(softmax(in[0], 1), in[0]); },
                  {random_f64({2, 5}, 32, -3.0, 3.0)});
}

TEST_CASE("softmax: backward of a 1-D input matches the Jacobian") {
  Tensor x = tensor<double>({0.5, -1.0, 2.0});
  x.requires_grad_();
  Tensor y = softmax(x, 0);
  Tensor g = tensor<double>({1.0, 0.0, 0.0});
  y.backward(g);
  std::vector<double> p = y.detach().tolist();
  // d y_0 / d x_j = y_0 (delta_0j - y_j)
  check_close(x.grad(), {p[0] * (1 - p[0]), -p[0] * p[1], -p[0] * p[2]}, tolerance(DType::f64));
}

TEST_CASE("softmax: dim out of range is an IndexError") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_AS(softmax(x, 2), IndexError);
  CHECK_THROWS_WITH(softmax(x, -3), Catch::Contains("softmax") && Catch::Contains("-3"));
  CHECK_THROWS_AS(log_softmax(x, 5), IndexError);
  CHECK_THROWS_WITH(log_softmax(x, 5), Catch::Contains("log_softmax"));
}

TEST_CASE("softmax: integer and undefined inputs are rejected") {
  Tensor ints = tensor<int64_t>({1, 2, 3});
  CHECK_THROWS_AS(softmax(ints, 0), DTypeError);
  CHECK_THROWS_WITH(log_softmax(ints, 0), Catch::Contains("log_softmax") && Catch::Contains("i64"));
  CHECK_THROWS_AS(softmax(Tensor(), 0), ValueError);
}
