// batch_norm and layer_norm: forward against plain loops, the running-stat update checked by
// hand, gradchecks in training and inference, and error cases; batch_norm_relu against the two
// ops it fuses.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu_isa_scope.h"
#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using testing::check_close;
using testing::random_f64;
using testing::tolerance;

namespace {

// Normalises x ([N, C, ...]) per channel with the batch statistics (training) or the given ones.
std::vector<double> reference_batch_norm(const Tensor& x, const std::vector<double>& weight,
                                         const std::vector<double>& bias, double eps,
                                         const std::vector<double>* running_mean = nullptr,
                                         const std::vector<double>* running_var = nullptr) {
  const int64_t n = x.size(0), c = x.size(1), s = x.numel() / std::max<int64_t>(n * c, 1);
  std::vector<double> v = x.tolist(), out(v.size());
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    if (running_mean) {
      mean = (*running_mean)[ch];
      var = (*running_var)[ch];
    } else {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) mean += v[(i * c + ch) * s + j];
      mean /= static_cast<double>(n * s);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) var += std::pow(v[(i * c + ch) * s + j] - mean, 2);
      var /= static_cast<double>(n * s);
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        int64_t k = (i * c + ch) * s + j;
        double w = weight.empty() ? 1.0 : weight[ch], b = bias.empty() ? 0.0 : bias[ch];
        out[k] = (v[k] - mean) / std::sqrt(var + eps) * w + b;
      }
  }
  return out;
}

std::vector<double> reference_layer_norm(const Tensor& x, int64_t k,
                                         const std::vector<double>& weight,
                                         const std::vector<double>& bias, double eps) {
  std::vector<double> v = x.tolist(), out(v.size());
  const int64_t rows = k == 0 ? 0 : x.numel() / k;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < k; ++j) mean += v[r * k + j];
    mean /= static_cast<double>(k);
    for (int64_t j = 0; j < k; ++j) var += std::pow(v[r * k + j] - mean, 2);
    var /= static_cast<double>(k);
    for (int64_t j = 0; j < k; ++j) {
      double w = weight.empty() ? 1.0 : weight[j], b = bias.empty() ? 0.0 : bias[j];
      out[r * k + j] = (v[r * k + j] - mean) / std::sqrt(var + eps) * w + b;
    }
  }
  return out;
}

}  // namespace

// ---- batch_norm forward ----

TEST_CASE("normalization: batch_norm in training matches a loop reference") {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (Shape shape : {Shape{6, 3}, Shape{4, 3, 5}, Shape{2, 3, 4, 5}}) {
      INFO(shape_str(shape) << " " << dtype_name(dtype));
      Tensor x = random_f64(shape, 1, -2.0, 3.0).to(dtype);
      Tensor w = random_f64({3}, 2).to(dtype), b = random_f64({3}, 3).to(dtype);
      Tensor y = batch_norm(x, Tensor(), Tensor(), w, b, true);
      CHECK(y.dtype() == dtype);
      CHECK(y.shape() == shape);
      check_close(y, reference_batch_norm(x, w.tolist(), b.tolist(), 1e-5), tolerance(dtype));
      check_close(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-3),
                  reference_batch_norm(x, {}, {}, 1e-3), tolerance(dtype));
    }
  }
}

TEST_CASE("normalization: batch_norm on non-contiguous inputs") {
  Tensor base = random_f64({3, 4, 5, 6}, 4);
  Tensor w = random_f64({4}, 5), b = random_f64({4}, 6);
  for (const Tensor& x : {base.transpose(2, 3), base.slice(3, 0, 6, 2),
                          base.permute({1, 0, 2, 3}).contiguous().permute({1, 0, 2, 3}),
                          random_f64({1, 4, 3}, 7).expand({5, 4, 3})}) {
    INFO(shape_str(x.shape()));
    check_close(batch_norm(x, Tensor(), Tensor(), w, b, true),
                reference_batch_norm(x, w.tolist(), b.tolist(), 1e-5), tolerance(DType::f64));
  }
}

TEST_CASE("normalization: batch_norm updates the running stats by hand-computed values") {
  // Channel 0: {1, 2, 3, 4}, mean 2.5, biased variance 1.25, unbiased 5/3.
  // Channel 1: {0, 0, 6, 6}, mean 3, biased variance 9, unbiased 12.
  Tensor x = tensor<double>({1, 0, 2, 0, 3, 6, 4, 6}, {4, 2});
  Tensor running_mean = tensor<double>({0.0, 1.0});
  Tensor running_var = tensor<double>({1.0, 2.0});
  Tensor y = batch_norm(x, running_mean, running_var, Tensor(), Tensor(), true, 0.1, 0.0);
  std::vector<double> rm = running_mean.tolist(), rv = running_var.tolist();
  CHECK(rm[0] == Approx(0.9 * 0.0 + 0.1 * 2.5));
  CHECK(rm[1] == Approx(0.9 * 1.0 + 0.1 * 3.0));
  CHECK(rv[0] == Approx(0.9 * 1.0 + 0.1 * 5.0 / 3.0));
  CHECK(rv[1] == Approx(0.9 * 2.0 + 0.1 * 12.0));
  // The output uses the biased variance: (1 - 2.5) / sqrt(1.25).
  CHECK(y.tolist()[0] == Approx(-1.5 / std::sqrt(1.25)));
  CHECK(y.tolist()[1] == Approx(-1.0));
  // A second step moves them again with momentum 0.5.
  batch_norm(x, running_mean, running_var, Tensor(), Tensor(), true, 0.5, 0.0);
  CHECK(running_mean.tolist()[0] == Approx(0.5 * 0.25 + 0.5 * 2.5));
  CHECK(running_var.tolist()[1] == Approx(0.5 * 3.0 + 0.5 * 12.0));
}

TEST_CASE("normalization: batch_norm's batch statistics over many rows with a large mean") {
  // 1000 + U(-1, 1): E[x^2] - E[x]^2 would cancel to noise in f32; rows of 49, 784 and 4096
  // elements (the vector loops and their tails), combined across 64 images. Momentum 1 leaves the
  // batch's own mean and unbiased variance in the running stats (f64), compared with a double
  // reference.
  for (int64_t side : {7, 28, 64})
    for (DType dtype : {DType::f32, DType::bf16}) {
      INFO(side << " " << dtype_name(dtype));
      Tensor x = (random_f64({64, 2, side, side}, 9, -1.0, 1.0) + 1000.0).to(dtype);
      const std::vector<double> v = x.to(DType::f64).tolist();
      Tensor running_mean = zeros({2}, DType::f64), running_var = zeros({2}, DType::f64);
      batch_norm(x, running_mean, running_var, Tensor(), Tensor(), true, 1.0, 1e-5);
      const int64_t s = side * side, count = 64 * s;
      for (int64_t c = 0; c < 2; ++c) {
        double mean = 0, squares = 0;
        for (int64_t i = 0; i < 64; ++i)
          for (int64_t j = 0; j < s; ++j) mean += v[(i * 2 + c) * s + j];
        mean /= static_cast<double>(count);
        for (int64_t i = 0; i < 64; ++i)
          for (int64_t j = 0; j < s; ++j) squares += std::pow(v[(i * 2 + c) * s + j] - mean, 2);
        CHECK(running_mean.tolist()[c] == Approx(mean).epsilon(1e-7));
        CHECK(running_var.tolist()[c] ==
              Approx(squares / static_cast<double>(count - 1)).epsilon(1e-5));
      }
    }
}

TEST_CASE("normalization: batch_norm running stats of another dtype and without history") {
  Tensor x = random_f64({5, 3, 2}, 8).to(DType::f32).requires_grad_();
  Tensor running_mean = zeros({3}, DType::f64), running_var = ones({3}, DType::f64);
  uint64_t version = running_mean.version();
  Tensor y = batch_norm(x, running_mean, running_var, Tensor(), Tensor(), true);
  CHECK(y.requires_grad());
  CHECK(running_mean.version() > version);
  CHECK_FALSE(running_mean.requires_grad());
  CHECK(running_mean.grad_fn() == nullptr);
  CHECK(running_var.dtype() == DType::f64);
  std::vector<double> v = x.detach().tolist();
  double mean0 = (v[0] + v[1] + v[6] + v[7] + v[12] + v[13] + v[18] + v[19] + v[24] + v[25]) / 10;
  CHECK(running_mean.tolist()[0] == Approx(0.1 * mean0).epsilon(1e-6));
}

TEST_CASE("normalization: batch_norm in inference uses the running stats") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = random_f64({3, 2, 4}, 9).to(dtype);
    Tensor running_mean = tensor<double>({0.5, -1.0}).to(dtype);
    Tensor running_var = tensor<double>({2.0, 0.25}).to(dtype);
    Tensor w = tensor<double>({1.5, -0.5}).to(dtype), b = tensor<double>({0.1, 0.2}).to(dtype);
    std::vector<double> rm = running_mean.tolist(), rv = running_var.tolist();
    Tensor y = batch_norm(x, running_mean, running_var, w, b, false, 0.1, 1e-5);
    check_close(y, reference_batch_norm(x, w.tolist(), b.tolist(), 1e-5, &rm, &rv),
                tolerance(dtype));
    CHECK(running_mean.tolist() == rm);
    CHECK(running_var.tolist() == rv);
    // One value per channel is fine outside training.
    CHECK(batch_norm(x.slice(0, 0, 1).slice(2, 0, 1), running_mean, running_var, w, b, false)
              .shape() == Shape{1, 2, 1});
  }
}

TEST_CASE("normalization: batch_norm in f16 and bf16") {
  Tensor x = random_f64({4, 3, 5}, 10);
  Tensor w = random_f64({3}, 11);
  for (DType dtype : {DType::f16, DType::bf16}) {
    Tensor xh = x.to(dtype);
    Tensor y = batch_norm(xh, Tensor(), Tensor(), w.to(dtype), Tensor(), true);
    CHECK(y.dtype() == dtype);
    check_close(y, reference_batch_norm(xh, w.to(dtype).tolist(), {}, 1e-5), tolerance(dtype));
  }
}

TEST_CASE("normalization: batch_norm with an empty batch leaves the running stats") {
  Tensor running_mean = tensor<double>({1.0, 2.0}), running_var = tensor<double>({3.0, 4.0});
  Tensor y =
      batch_norm(zeros({0, 2, 3}, DType::f64), running_mean, running_var, Tensor(), Tensor(), true);
  CHECK(y.shape() == Shape{0, 2, 3});
  CHECK(running_mean.tolist() == std::vector<double>{1.0, 2.0});
  CHECK(running_var.tolist() == std::vector<double>{3.0, 4.0});
}

// ---- batch_norm backward ----

TEST_CASE("normalization: batch_norm gradcheck in training w.r.t. x, weight and bias") {
  for (Shape shape : {Shape{5, 3}, Shape{2, 3, 3, 2}}) {
    INFO(shape_str(shape));
    CHECK_GRADCHECK(
        [](const std::vector<Tensor>& in) {
          return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-5);
        },
        {random_f64(shape, 12), random_f64({3}, 13), random_f64({3}, 14)});
  }
}

TEST_CASE("normalization: batch_norm gradcheck in training without affine and with running stats") {
  Tensor running_mean = zeros({2}, DType::f64), running_var = ones({2}, DType::f64);
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return batch_norm(in[0], running_mean, running_var, Tensor(), Tensor(), true);
      },
      {random_f64({4, 2, 3}, 15)});
}

TEST_CASE("normalization: batch_norm gradcheck in inference") {
  Tensor running_mean = tensor<double>({0.3, -0.2, 0.1});
  Tensor running_var = tensor<double>({0.5, 1.5, 2.0});
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return batch_norm(in[0], running_mean, running_var, in[1], in[2], false);
      },
      {random_f64({4, 3, 2}, 16), random_f64({3}, 17), random_f64({3}, 18)});
}

TEST_CASE("normalization: batch_norm backward through only some inputs") {
  Tensor x = random_f64({4, 3}, 19);
  Tensor w = random_f64({3}, 20).requires_grad_();
  Tensor b = random_f64({3}, 21);
  Tensor y = batch_norm(x, Tensor(), Tensor(), w, b, true);
  CHECK(y.grad_fn()->name() == "BatchNormBackward");
  sum(y).backward();
  REQUIRE(w.grad().defined());
  // sum(x_hat) over a channel is 0, so the weight's gradient under sum() is 0.
  check_close(w.grad(), zeros({3}, DType::f64), tolerance(DType::f64));
}

TEST_CASE("normalization: batch_norm's backward over many rows matches a loop reference") {
  // Rows of 784 and 49 elements over 16 images: enough rows that the threads split them, the
  // per-channel sums gathered from rows of every image. The gradients of x, weight and bias in
  // training against the formula in double: dx = w invstd (g - mean(g) - x_hat mean(g x_hat)).
  uint64_t seed = 300;
  for (int64_t side : {28, 7})
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(side << " " << dtype_name(dtype));
      const int64_t n = 16, channels = side == 28 ? 3 : 40, s = side * side;
      Tensor x = random_f64({n, channels, side, side}, seed++, -1.0, 3.0).to(dtype);
      Tensor g = random_f64({n, channels, side, side}, seed++).to(dtype);
      Tensor w = random_f64({channels}, seed++, 0.5, 1.5).to(dtype).requires_grad_();
      Tensor b = random_f64({channels}, seed++).to(dtype).requires_grad_();
      Tensor xg = x.detach().requires_grad_();
      batch_norm(xg, Tensor(), Tensor(), w, b, true).backward(g);
      const std::vector<double> xv = x.to(DType::f64).tolist(), gv = g.to(DType::f64).tolist();
      const std::vector<double> wv = w.to(DType::f64).tolist();
      std::vector<double> dx(xv.size()), dw(channels), db(channels);
      const double count = static_cast<double>(n * s);
      for (int64_t c = 0; c < channels; ++c) {
        auto at = [&](int64_t i, int64_t j) { return (i * channels + c) * s + j; };
        double mean = 0, var = 0, sum_g = 0, sum_gx = 0;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < s; ++j) mean += xv[at(i, j)] / count;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < s; ++j) var += std::pow(xv[at(i, j)] - mean, 2) / count;
        const double invstd = 1.0 / std::sqrt(var + 1e-5);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < s; ++j) {
            sum_g += gv[at(i, j)];
            sum_gx += gv[at(i, j)] * (xv[at(i, j)] - mean) * invstd;
          }
        dw[c] = sum_gx, db[c] = sum_g;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < s; ++j) {
            const double x_hat = (xv[at(i, j)] - mean) * invstd;
            dx[at(i, j)] = wv[c] * invstd * (gv[at(i, j)] - sum_g / count - x_hat * sum_gx / count);
          }
      }
      const double rtol = dtype == DType::f32 ? 1e-4 : 1e-10;
      check_close(xg.grad(), dx, testing::relative_to_largest(rtol, dx));
      check_close(w.grad(), dw, testing::relative_to_largest(rtol, dw));
      check_close(b.grad(), db, testing::relative_to_largest(rtol, db));
    }
}

// ---- batch_norm_relu ----

// batch_norm_relu against relu(batch_norm(...)) with the same inputs: the outputs, the running
// stats it updates, and the gradients of x, weight and bias under a random upstream gradient.
void check_batch_norm_relu(const Shape& shape, DType dtype, bool training, bool affine,
                           uint64_t seed) {
  INFO(shape_str(shape) << " " << dtype_name(dtype) << (training ? " training" : " inference")
                        << (affine ? " affine" : ""));
  const int64_t c = shape[1];
  Tensor x = random_f64(shape, seed).to(dtype);
  Tensor w = affine ? random_f64({c}, seed + 1).to(dtype) : Tensor();
  Tensor b = affine ? random_f64({c}, seed + 2).to(dtype) : Tensor();
  Tensor mean_fused = random_f64({c}, seed + 3).to(dtype), mean_plain = mean_fused.clone();
  Tensor var_fused = random_f64({c}, seed + 4, 0.5, 2.0).to(dtype), var_plain = var_fused.clone();
  auto leaves = [&] {
    std::vector<Tensor> v{x.detach().requires_grad_()};
    if (affine) v.push_back(w.detach().requires_grad_()), v.push_back(b.detach().requires_grad_());
    return v;
  };
  std::vector<Tensor> fused_in = leaves(), plain_in = leaves();
  Tensor fused =
      batch_norm_relu(fused_in[0], mean_fused, var_fused, affine ? fused_in[1] : Tensor(),
                      affine ? fused_in[2] : Tensor(), training);
  Tensor plain =
      relu(batch_norm(plain_in[0], mean_plain, var_plain, affine ? plain_in[1] : Tensor(),
                      affine ? plain_in[2] : Tensor(), training));
  // The same expression per element, then the same comparison with 0: equal bit for bit.
  CHECK(fused.tolist() == plain.tolist());
  CHECK(mean_fused.tolist() == mean_plain.tolist());
  CHECK(var_fused.tolist() == var_plain.tolist());
  CHECK(fused.grad_fn()->name() == "BatchNormReluBackward");
  Tensor r = random_f64(shape, seed + 5).to(dtype);
  sum(mul(fused, r)).backward();
  sum(mul(plain, r)).backward();
  for (size_t i = 0; i < fused_in.size(); ++i) {
    INFO("input " << i);
    check_close(fused_in[i].grad(), plain_in[i].grad().tolist(), tolerance(dtype));
  }
}

TEST_CASE("normalization: batch_norm_relu equals relu(batch_norm) forward and backward") {
  uint64_t seed = 40;
  for (DType dtype : {DType::f32, DType::f64})
    for (bool training : {true, false})
      for (bool affine : {true, false}) {
        check_batch_norm_relu({4, 3, 5, 6}, dtype, training, affine, seed += 6);
        check_batch_norm_relu({6, 2}, dtype, training, affine, seed += 6);
      }
}

TEST_CASE("normalization: batch_norm_relu in 16 bits masks the gradient by the stored output") {
  // A weight of the dtype's smallest positive value makes y = x_hat * weight, computed in f32, so
  // small that wherever 0 < x_hat <= 0.5 it rounds to a stored 0: relu's gradient must be 0 there,
  // as in relu(batch_norm(x)) and PyTorch, which read the stored output.
  for (DType dtype : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    const Shape shape{4, 3, 5, 6};
    Tensor x = random_f64(shape, 97).to(dtype);
    const float smallest = dtype == DType::f16 ? static_cast<float>(Half::from_bits(1))
                                               : static_cast<float>(BFloat16::from_bits(1));
    Tensor w = full({3}, smallest, dtype), b = zeros({3}, dtype);
    auto leaves = [&] {
      return std::vector<Tensor>{x.detach().requires_grad_(), w.detach().requires_grad_(),
                                 b.detach().requires_grad_()};
    };
    std::vector<Tensor> fused_in = leaves(), plain_in = leaves();
    Tensor fused = batch_norm_relu(fused_in[0], Tensor(), Tensor(), fused_in[1], fused_in[2], true);
    Tensor plain =
        relu(batch_norm(plain_in[0], Tensor(), Tensor(), plain_in[1], plain_in[2], true));
    CHECK(fused.tolist() == plain.tolist());
    // The case under test occurs: y is positive in f32 and stored as 0.
    const std::vector<double> y32 =
        batch_norm(x.to(DType::f32), Tensor(), Tensor(), w.to(DType::f32), Tensor(), true).tolist();
    const std::vector<double> stored = fused.tolist();
    int64_t rounded_to_zero = 0;
    for (size_t i = 0; i < y32.size(); ++i) rounded_to_zero += y32[i] > 0 && stored[i] == 0;
    REQUIRE(rounded_to_zero > 0);
    sum(fused).backward();
    sum(plain).backward();
    for (size_t i = 0; i < fused_in.size(); ++i) {
      INFO("input " << i);
      check_close(fused_in[i].grad(), plain_in[i].grad().tolist(), tolerance(dtype));
    }
  }
}

TEST_CASE("normalization: batch_norm_relu gradcheck w.r.t. x, weight and bias") {
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return batch_norm_relu(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-5);
      },
      {random_f64({3, 2, 2, 3}, 90), random_f64({2}, 91), random_f64({2}, 92)});
}

TEST_CASE("normalization: BatchNorm2d::forward_relu is relu(forward) and counts the batch") {
  nn::BatchNorm2d fused(3), plain(3);
  Tensor x = random_f64({2, 3, 4, 4}, 95).to(DType::f32);
  CHECK(fused.forward_relu(x).tolist() == relu(plain.forward(x)).tolist());
  CHECK(fused.running_mean.tolist() == plain.running_mean.tolist());
  CHECK(fused.num_batches_tracked.item<int64_t>() == 1);
  fused.eval(), plain.eval();
  CHECK(fused.forward_relu(x).tolist() == relu(plain.forward(x)).tolist());
}

namespace {

// relu(batch_norm(x) + residual) fused, forward: one pass on the CPU, in f32 for the 16-bit
// floats, against the three ops on f32 copies, rounded at the end. Rows of 10 and of 49 (whole
// vectors and a tail: bf16 rows are widened and rounded inside the vector loops).
void check_add_relu_forward() {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (bool training : {true, false})
      for (const Shape& shape : {Shape{4, 3, 5, 2}, Shape{2, 3, 7, 7}}) {
        INFO(dtype_name(dtype) << (training ? " training" : " inference") << ", "
                               << shape_str(shape));
        const DType wide = dtype == DType::f64 ? DType::f64 : DType::f32;
        const Tensor x = add(random_f64(shape, 100, -2.0, 2.0), 3.0).to(dtype);
        const Tensor r = random_f64(shape, 101, -1.5, 1.5).to(dtype);
        const Tensor w = random_f64({3}, 102, 0.5, 1.5).to(dtype),
                     b = random_f64({3}, 103).to(dtype);
        Tensor rm = random_f64({3}, 104).to(dtype), rv = random_f64({3}, 105, 0.5, 2.0).to(dtype);
        Tensor rm_plain = rm.clone(), rv_plain = rv.clone();
        Tensor y = batch_norm_add_relu(x, r, rm, rv, w, b, training);
        Tensor want =
            relu(add(batch_norm(x.to(wide), rm_plain, rv_plain, w, b, training), r.to(wide)))
                .to(dtype);
        CHECK(y.dtype() == dtype);
        CHECK(y.tolist() == want.tolist());
        CHECK(rm.tolist() == rm_plain.tolist());
        CHECK(rv.tolist() == rv_plain.tolist());
      }
  }
}

// The fused backward: the CPU's kernels take the residual and mask the gradient by the stored
// output: gradients of x, residual, weight and bias against relu(batch_norm(x) + residual) in the
// compute dtype, training and inference, NCHW and channels-last.
void check_add_relu_backward() {
  uint64_t seed = 120;
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (bool training : {true, false})
      for (MemoryFormat format : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
        INFO(dtype_name(dtype) << (training ? " training" : " inference")
                               << (format == MemoryFormat::channels_last ? " channels-last" : ""));
        const Shape shape{4, 3, 5, 6};
        const DType wide = dtype == DType::f64 ? DType::f64 : DType::f32;
        const Tensor x = random_f64(shape, seed++).to(dtype).contiguous(format);
        const Tensor r = random_f64(shape, seed++).to(dtype).contiguous(format);
        const Tensor g = random_f64(shape, seed++).to(dtype);
        const Tensor w = random_f64({3}, seed++, 0.5, 1.5), b = random_f64({3}, seed++);
        auto leaves = [&] {
          return std::vector<Tensor>{x.detach().requires_grad_(), r.detach().requires_grad_(),
                                     w.detach().requires_grad_(), b.detach().requires_grad_()};
        };
        std::vector<Tensor> fused_in = leaves(), plain_in = leaves();
        Tensor rm = zeros({3}, DType::f64), rv = ones({3}, DType::f64);
        Tensor fused = batch_norm_add_relu(fused_in[0], fused_in[1], rm, rv, fused_in[2],
                                           fused_in[3], training);
        Tensor plain = relu(add(batch_norm(plain_in[0].to(wide), rm.clone(), rv.clone(),
                                           plain_in[2], plain_in[3], training),
                                plain_in[1].to(wide)))
                           .to(dtype);
        CHECK(fused.grad_fn()->name() == "BatchNormAddReluBackward");
        CHECK(fused.is_contiguous(format));
        CHECK(fused.tolist() == plain.tolist());
        fused.backward(g);
        plain.backward(g);
        // The residual's gradient is g where the output is positive: exactly the three ops'.
        CHECK(fused_in[1].grad().tolist() == plain_in[1].grad().tolist());
        for (size_t i : {size_t{0}, size_t{2}, size_t{3}}) {
          INFO("input " << i);
          check_close(fused_in[i].grad(), plain_in[i].grad().tolist(),
                      testing::relative_to_largest(testing::gradient_tolerance(dtype).rtol,
                                                   plain_in[i].grad()));
        }
        // Only the residual wanting a gradient (x a constant): the backward skips grad_x and
        // still writes the residual's.
        Tensor r_only = r.detach().requires_grad_();
        batch_norm_add_relu(x, r_only, rm.clone(), rv.clone(), w, b, training).backward(g);
        CHECK(r_only.grad().tolist() == plain_in[1].grad().tolist());
      }
}

// Runs both with batch norm's row loops of `isa` (they exist once per instruction set, as the
// convolution's tiles), or says why not: a set this CPU cannot run is reported skipped.
void check_add_relu_with(CpuIsa isa) {
  testing::with_cpu_isa(isa, [] {
    check_add_relu_forward();
    check_add_relu_backward();
  });
}

}  // namespace

TEST_CASE("normalization: batch_norm_add_relu forward and backward, the best loops this CPU runs") {
  check_add_relu_forward();
  check_add_relu_backward();
}

TEST_CASE("normalization: batch_norm_add_relu forward and backward, portable loops") {
  check_add_relu_with(CpuIsa::baseline);
}

TEST_CASE("normalization: batch_norm_add_relu forward and backward, AVX2 loops", "[may_skip]") {
  check_add_relu_with(CpuIsa::avx2);
}

TEST_CASE("normalization: batch_norm_add_relu forward and backward, AVX-512 loops", "[may_skip]") {
  check_add_relu_with(CpuIsa::avx512);
}

TEST_CASE("normalization: batch_norm_add_relu gradcheck w.r.t. x, residual, weight and bias") {
  for (bool training : {true, false}) {
    INFO("training " << training);
    Tensor rm = random_f64({2}, 106), rv = random_f64({2}, 107, 0.5, 2.0);
    CHECK_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          return batch_norm_add_relu(in[0], in[1], rm, rv, in[2], in[3], training, 0.0, 1e-5);
        },
        {random_f64({3, 2, 2, 3}, 108), random_f64({3, 2, 2, 3}, 109), random_f64({2}, 110),
         random_f64({2}, 111)});
  }
}

TEST_CASE("normalization: batch_norm_add_relu errors and BatchNorm2d::forward_add_relu") {
  Tensor x = zeros({4, 3, 2, 2});
  CHECK_THROWS_AS(
      batch_norm_add_relu(x, zeros({4, 3, 2, 1}), Tensor(), Tensor(), Tensor(), Tensor(), true),
      ShapeError);
  CHECK_THROWS_WITH(
      batch_norm_add_relu(x, zeros({4, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true),
      Catch::Contains("batch_norm_add_relu") && Catch::Contains("residual") &&
          Catch::Contains("[4, 3, 2, 2]"));
  CHECK_THROWS_AS(batch_norm_add_relu(x, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), true),
                  ValueError);
  nn::BatchNorm2d fused(3), plain(3);
  Tensor in = random_f64({2, 3, 4, 4}, 112).to(DType::f32),
         r = random_f64({2, 3, 4, 4}, 113).to(DType::f32);
  CHECK(fused.forward_add_relu(in, r).tolist() == relu(add(plain.forward(in), r)).tolist());
  CHECK(fused.running_var.tolist() == plain.running_var.tolist());
  CHECK(fused.num_batches_tracked.item<int64_t>() == 1);
}

// ---- layer_norm ----

TEST_CASE("normalization: layer_norm matches a loop reference") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = random_f64({3, 4, 5}, 30, -2.0, 2.0).to(dtype);
    for (Shape normalized : {Shape{5}, Shape{4, 5}, Shape{3, 4, 5}}) {
      INFO(shape_str(normalized) << " " << dtype_name(dtype));
      Tensor w = random_f64(normalized, 31).to(dtype), b = random_f64(normalized, 32).to(dtype);
      int64_t k = shape_numel(normalized);
      Tensor y = layer_norm(x, normalized, w, b);
      CHECK(y.dtype() == dtype);
      CHECK(y.shape() == x.shape());
      check_close(y, reference_layer_norm(x, k, w.tolist(), b.tolist(), 1e-5), tolerance(dtype));
      check_close(layer_norm(x, normalized, Tensor(), Tensor(), 1e-2),
                  reference_layer_norm(x, k, {}, {}, 1e-2), tolerance(dtype));
    }
  }
}

TEST_CASE("normalization: layer_norm on non-contiguous, empty and 16-bit inputs") {
  Tensor base = random_f64({4, 6, 5}, 33);
  Tensor w = random_f64({6}, 34);
  for (const Tensor& x : {base.transpose(1, 2), random_f64({6}, 35).expand({4, 6}),
                          base.slice(1, 0, 6, 2).transpose(1, 2).slice(1, 0, 6)}) {
    INFO(shape_str(x.shape()));
    Tensor weight = x.size(-1) == 6 ? w : Tensor();
    check_close(layer_norm(x, {x.size(-1)}, weight),
                reference_layer_norm(
                    x, x.size(-1), weight.defined() ? w.tolist() : std::vector<double>{}, {}, 1e-5),
                tolerance(DType::f64));
  }
  CHECK(layer_norm(zeros({0, 5}), {5}).shape() == Shape{0, 5});
  for (DType dtype : {DType::f16, DType::bf16}) {
    Tensor x = base.to(dtype);
    Tensor y = layer_norm(x, {5});
    CHECK(y.dtype() == dtype);
    check_close(y, reference_layer_norm(x, 5, {}, {}, 1e-5), tolerance(dtype));
  }
}

TEST_CASE("normalization: layer_norm gradcheck w.r.t. x, weight and bias") {
  for (Shape normalized : {Shape{4}, Shape{3, 4}}) {
    INFO(shape_str(normalized));
    CHECK_GRADCHECK(
        [&](const std::vector<Tensor>& in) { return layer_norm(in[0], normalized, in[1], in[2]); },
        {random_f64({2, 3, 4}, 36), random_f64(normalized, 37), random_f64(normalized, 38)});
  }
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return layer_norm(in[0], {6}); },
                  {random_f64({3, 6}, 39)});
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) { return layer_norm(in[0], {5}, in[1], Tensor()); },
      {random_f64({5}, 40), random_f64({5}, 41)});
}

// ---- errors ----

TEST_CASE("normalization: batch_norm errors") {
  Tensor x = zeros({4, 3});
  CHECK_THROWS_AS(batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true), ShapeError);
  CHECK_THROWS_WITH(batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true),
                    Catch::Contains("batch_norm") && Catch::Contains("[4]"));
  CHECK_THROWS_AS(batch_norm(x, Tensor(), Tensor(), zeros({4}), Tensor(), true), ShapeError);
  CHECK_THROWS_WITH(batch_norm(x, Tensor(), Tensor(), zeros({4}), Tensor(), true),
                    Catch::Contains("weight") && Catch::Contains("[3]"));
  CHECK_THROWS_AS(batch_norm(x, zeros({2}), ones({2}), Tensor(), Tensor(), true), ShapeError);
  CHECK_THROWS_AS(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false), ValueError);
  CHECK_THROWS_WITH(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false),
                    Catch::Contains("batch_norm") && Catch::Contains("running_mean"));
  CHECK_THROWS_AS(batch_norm(x, zeros({3}), Tensor(), Tensor(), Tensor(), true), ValueError);
  CHECK_THROWS_AS(batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true),
                  ValueError);
  CHECK_THROWS_WITH(batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true),
                    Catch::Contains("more than 1 value per channel"));
  CHECK_THROWS_AS(
      batch_norm(zeros({4, 3}, DType::i64), Tensor(), Tensor(), Tensor(), Tensor(), true),
      DTypeError);
  CHECK_THROWS_AS(batch_norm(Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), true), ValueError);
}

TEST_CASE("normalization: layer_norm errors") {
  Tensor x = zeros({2, 3, 4});
  CHECK_THROWS_AS(layer_norm(x, {3}), ShapeError);
  CHECK_THROWS_WITH(layer_norm(x, {3}), Catch::Contains("layer_norm") && Catch::Contains("[3]") &&
                                            Catch::Contains("[2, 3, 4]"));
  CHECK_THROWS_AS(layer_norm(x, {1, 2, 3, 4}), ShapeError);
  CHECK_THROWS_AS(layer_norm(x, {}), ValueError);
  CHECK_THROWS_AS(layer_norm(x, {4}, zeros({3})), ShapeError);
  CHECK_THROWS_WITH(layer_norm(x, {4}, Tensor(), zeros({4, 1})),
                    Catch::Contains("bias") && Catch::Contains("[4]"));
  CHECK_THROWS_AS(layer_norm(zeros({2, 4}, DType::i32), {4}), DTypeError);
}
