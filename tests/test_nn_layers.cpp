// The layers against the ops they wrap (forward and gradients), BatchNorm's modes and running
// statistics, a gradcheck of a small model, the containers and loss modules, and the default
// initialisation's statistics.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/nn/container.h"
#include "kiln/nn/init.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/loss.h"
#include "parity.h"

using namespace kiln;
using testing::check_close;
using testing::random_f64;
using testing::tolerance;

namespace {

Tensor random_f32(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  return random_f64(shape, seed, low, high).to(DType::f32);
}

// An independent leaf with the same values, for running the op beside the module.
Tensor leaf_copy(const Tensor& t) {
  Tensor c = t.detach().clone();
  c.requires_grad_();
  return c;
}

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};

Stats stats_of(const Tensor& t) {
  std::vector<double> v = t.tolist();
  Stats s{0, 0, v.at(0), v.at(0)};
  for (double x : v) {
    s.mean += x;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
  }
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / static_cast<double>(v.size()));
  return s;
}

// Uniform on [-bound, bound]: inside it, reaching close to both ends, with the uniform's std.
void check_uniform(const Tensor& t, double bound) {
  Stats s = stats_of(t);
  CHECK(s.min >= -bound);
  CHECK(s.max <= bound);
  CHECK(s.min < -0.95 * bound);
  CHECK(s.max > 0.95 * bound);
  CHECK(s.mean == Approx(0.0).margin(0.05 * bound));
  CHECK(s.std == Approx(bound / std::sqrt(3.0)).epsilon(0.05));
}

}  // namespace

TEST_CASE("nn layers: Linear equals linear(x, W, b), forward and backward") {
  nn::Linear layer(5, 3);
  CHECK(layer.weight.shape() == Shape{3, 5});
  CHECK(layer.bias.shape() == Shape{3});
  Tensor x = leaf_copy(random_f32({2, 4, 5}, 1));
  Tensor w = leaf_copy(layer.weight), b = leaf_copy(layer.bias), x2 = leaf_copy(x);
  Tensor y = layer(x);
  Tensor expected = linear(x2, w, b);
  CHECK(y.tolist() == expected.tolist());
  Tensor g = random_f32(y.shape(), 2);
  y.backward(g);
  expected.backward(g);
  check_close(layer.weight.grad(), w.grad(), tolerance(DType::f32));
  check_close(layer.bias.grad(), b.grad(), tolerance(DType::f32));
  check_close(x.grad(), x2.grad(), tolerance(DType::f32));
}

TEST_CASE("nn layers: non-contiguous, f64 and empty inputs") {
  nn::Linear layer(5, 3);
  Tensor x = random_f32({4, 5}, 40);
  // A transposed x reaches the GEMM as a column-major operand, which Eigen may sum in another
  // order than a row-major one: equal to rounding (bit for bit only while the build used
  // -march=native, before KILN_NATIVE_ARCH became off by default).
  check_close(layer(testing::non_contiguous(x)), layer(x), tolerance(DType::f32));
  CHECK(layer(zeros({0, 5})).shape() == Shape{0, 3});
  nn::Conv2d conv(2, 3, 3, nn::Conv2dOptions{.padding = 1});
  Tensor image = random_f32({2, 2, 5, 5}, 41);
  check_close(conv(image.permute({0, 1, 3, 2}).contiguous().permute({0, 1, 3, 2})), conv(image),
              tolerance(DType::f32));
  conv.to(DType::f64);
  Tensor y = conv(image.to(DType::f64));
  CHECK(y.dtype() == DType::f64);
  check_close(y, conv2d(image.to(DType::f64), conv.weight, conv.bias, {1, 1}, {1, 1}),
              tolerance(DType::f64));
}

TEST_CASE("nn layers: Linear without bias has only a weight") {
  nn::Linear layer(4, 2, /*bias=*/false);
  CHECK_FALSE(layer.bias.defined());
  REQUIRE(layer.named_parameters().size() == 1);
  CHECK(layer.named_parameters()[0].first == "weight");
  Tensor x = random_f32({3, 4}, 3);
  CHECK(layer(x).tolist() == linear(x, layer.weight).tolist());
  CHECK(layer.extra_repr() == "in_features=4, out_features=2, bias=False");
  CHECK_THROWS_AS(nn::Linear(0, 2), ValueError);
  CHECK_THROWS_AS(layer(random_f32({3, 5}, 4)), ShapeError);
}

TEST_CASE("nn layers: Conv2d with stride, padding, dilation and groups equals conv2d") {
  nn::Conv2dOptions options;
  options.stride = {2, 1};
  options.padding = {1, 2};
  options.dilation = {1, 2};
  options.groups = 2;
  nn::Conv2d conv(4, 6, Pair{3, 2}, options);
  CHECK(conv.weight.shape() == Shape{6, 2, 3, 2});
  CHECK(conv.bias.shape() == Shape{6});
  Tensor x = leaf_copy(random_f32({2, 4, 7, 6}, 4));
  Tensor w = leaf_copy(conv.weight), b = leaf_copy(conv.bias), x2 = leaf_copy(x);
  Tensor y = conv(x);
  Tensor expected = conv2d(x2, w, b, {2, 1}, {1, 2}, {1, 2}, 2);
  CHECK(y.tolist() == expected.tolist());
  Tensor g = random_f32(y.shape(), 5);
  y.backward(g);
  expected.backward(g);
  check_close(conv.weight.grad(), w.grad(), tolerance(DType::f32));
  check_close(conv.bias.grad(), b.grad(), tolerance(DType::f32));
  check_close(x.grad(), x2.grad(), tolerance(DType::f32));
  CHECK(conv.extra_repr() ==
        "4, 6, kernel_size=(3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2");
}

TEST_CASE("nn layers: Conv2d without bias, and bad channel counts") {
  nn::Conv2dOptions options;
  options.bias = false;
  nn::Conv2d conv(3, 4, 3, options);
  CHECK_FALSE(conv.bias.defined());
  CHECK(conv.parameter_count() == 4 * 3 * 9);
  Tensor x = random_f32({1, 3, 5, 5}, 6);
  CHECK(conv(x).tolist() == conv2d(x, conv.weight).tolist());
  options.groups = 2;
  CHECK_THROWS_AS(nn::Conv2d(3, 4, 3, options), ValueError);
  CHECK_THROWS_WITH(nn::Conv2d(3, 4, 3, options),
                    Catch::Contains("Conv2d") && Catch::Contains("groups"));
  CHECK_THROWS_AS(nn::Conv2d(0, 4, 3), ValueError);
  CHECK_THROWS_AS(nn::Conv2d(3, 4, 0), ValueError);
  CHECK_THROWS_AS(conv(random_f32({1, 2, 5, 5}, 7)), ShapeError);
}

TEST_CASE("nn layers: BatchNorm2d in training uses batch statistics and updates running ones") {
  nn::BatchNorm2d bn(3, {.momentum = 0.2});
  CHECK(bn.weight.tolist() == std::vector<double>{1, 1, 1});
  CHECK(bn.bias.tolist() == std::vector<double>{0, 0, 0});
  {
    NoGradGuard no_grad;
    bn.weight.copy_(tensor({0.5f, 2.0f, -1.0f}));
    bn.bias.copy_(tensor({0.1f, 0.0f, 0.3f}));
  }
  Tensor x = leaf_copy(random_f32({4, 3, 2, 3}, 8));
  Tensor x2 = leaf_copy(x), w = leaf_copy(bn.weight), b = leaf_copy(bn.bias);
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor y = bn(x);
  Tensor expected = batch_norm(x2, rm, rv, w, b, true, 0.2, 1e-5);
  CHECK(y.tolist() == expected.tolist());
  CHECK(bn.running_mean.tolist() == rm.tolist());
  CHECK(bn.running_var.tolist() == rv.tolist());
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);

  // The running stats by hand: 0.8 * old + 0.2 * batch, with the unbiased batch variance.
  std::vector<double> v = x.tolist(), rm_now = bn.running_mean.tolist(),
                      rv_now = bn.running_var.tolist();
  for (int64_t c = 0; c < 3; ++c) {
    double mean = 0, var = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t k = 0; k < 6; ++k) mean += v[(n * 3 + c) * 6 + k];
    mean /= 24;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t k = 0; k < 6; ++k) var += std::pow(v[(n * 3 + c) * 6 + k] - mean, 2);
    var /= 23;
    CHECK(rm_now[c] == Approx(0.2 * mean).margin(1e-6));
    CHECK(rv_now[c] == Approx(0.8 + 0.2 * var).margin(1e-6));
  }

  Tensor g = random_f32(y.shape(), 9);
  y.backward(g);
  expected.backward(g);
  check_close(x.grad(), x2.grad(), tolerance(DType::f32));
  check_close(bn.weight.grad(), w.grad(), tolerance(DType::f32));
  check_close(bn.bias.grad(), b.grad(), tolerance(DType::f32));

  bn(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
}

TEST_CASE("nn layers: BatchNorm2d in eval uses the running statistics and leaves them alone") {
  nn::BatchNorm2d bn(2);
  bn(random_f32({3, 2, 2, 2}, 10));
  bn.eval();
  std::vector<double> rm = bn.running_mean.tolist(), rv = bn.running_var.tolist();
  Tensor x = random_f32({2, 2, 3, 1}, 11);
  Tensor y = bn(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  CHECK(bn.running_mean.tolist() == rm);
  CHECK(bn.running_var.tolist() == rv);
  std::vector<double> v = x.tolist(), want;
  for (size_t i = 0; i < v.size(); ++i) {
    size_t c = (i / 3) % 2;
    want.push_back((v[i] - rm[c]) / std::sqrt(rv[c] + 1e-5));
  }
  check_close(y, want, tolerance(DType::f32));
  // Each sample is normalised on its own: a one-element batch gives the same rows.
  Tensor first = bn(x.narrow(0, 0, 1));
  check_close(first, y.narrow(0, 0, 1), tolerance(DType::f32));
}

TEST_CASE("nn layers: BatchNorm1d takes [N, C] and [N, C, L]") {
  nn::BatchNorm1d bn(3);
  Tensor x2 = random_f32({5, 3}, 12);
  CHECK(bn(x2).tolist() ==
        batch_norm(x2, zeros({3}), ones({3}), ones({3}), zeros({3}), true).tolist());
  Tensor x3 = random_f32({2, 3, 4}, 13);
  CHECK(bn(x3).shape() == Shape{2, 3, 4});
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  CHECK(bn.name() == "BatchNorm1d");
  CHECK_THROWS_AS(bn(random_f32({2, 3, 4, 4}, 14)), ShapeError);
  CHECK_THROWS_WITH(bn(random_f32({2, 3, 4, 4}, 14)),
                    Catch::Contains("BatchNorm1d") && Catch::Contains("[2, 3, 4, 4]"));
  CHECK_THROWS_AS(bn(random_f32({5, 4}, 15)), ShapeError);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
}

TEST_CASE("nn layers: BatchNorm2d rejects a wrong rank or channel count") {
  nn::BatchNorm2d bn(3);
  CHECK_THROWS_AS(bn(random_f32({2, 3}, 16)), ShapeError);
  CHECK_THROWS_WITH(bn(random_f32({2, 3}, 16)),
                    Catch::Contains("BatchNorm2d") && Catch::Contains("4-D"));
  CHECK_THROWS_WITH(bn(random_f32({2, 4, 2, 2}, 17)), Catch::Contains("3 channels"));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 0);
}

TEST_CASE("nn layers: BatchNorm without affine or running stats") {
  nn::BatchNorm2d bn(2, {.affine = false, .track_running_stats = false});
  CHECK(bn.named_parameters().empty());
  CHECK(bn.named_buffers().empty());
  Tensor x = random_f32({3, 2, 2, 2}, 18);
  Tensor expected = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  CHECK(bn(x).tolist() == expected.tolist());
  // Nothing to normalise with but the batch, in eval mode too.
  bn.eval();
  CHECK(bn(x).tolist() == expected.tolist());
  CHECK(bn.extra_repr() == "2, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False");
}

TEST_CASE("nn layers: LayerNorm equals layer_norm, forward and backward") {
  nn::LayerNorm ln({2, 3}, {.eps = 1e-6});
  {
    NoGradGuard no_grad;
    ln.weight.copy_(random_f32({2, 3}, 19));
    ln.bias.copy_(random_f32({2, 3}, 20));
  }
  Tensor x = leaf_copy(random_f32({4, 2, 3}, 21));
  Tensor x2 = leaf_copy(x), w = leaf_copy(ln.weight), b = leaf_copy(ln.bias);
  Tensor y = ln(x);
  Tensor expected = layer_norm(x2, {2, 3}, w, b, 1e-6);
  CHECK(y.tolist() == expected.tolist());
  Tensor g = random_f32(y.shape(), 22);
  y.backward(g);
  expected.backward(g);
  check_close(x.grad(), x2.grad(), tolerance(DType::f32));
  check_close(ln.weight.grad(), w.grad(), tolerance(DType::f32));
  check_close(ln.bias.grad(), b.grad(), tolerance(DType::f32));
  nn::LayerNorm plain({3}, {.elementwise_affine = false});
  CHECK(plain.named_parameters().empty());
  CHECK(plain(x2).shape() == Shape{4, 2, 3});
}

TEST_CASE("nn layers: Embedding looks up rows and keeps the padding row at zero") {
  nn::Embedding emb(5, 3, /*padding_idx=*/2);
  std::vector<double> w = emb.weight.tolist();
  CHECK(std::vector<double>(w.begin() + 6, w.begin() + 9) == std::vector<double>{0, 0, 0});
  Tensor idx = tensor(std::vector<int64_t>{4, 2, 0, 4}, {2, 2});
  Tensor y = emb(idx);
  CHECK(y.shape() == Shape{2, 2, 3});
  std::vector<double> out = y.tolist();
  std::vector<int64_t> rows = {4, 2, 0, 4};
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < 3; ++j) CHECK(out[i * 3 + j] == w[rows[i] * 3 + j]);
  y.backward(ones(y.shape()));
  std::vector<double> g = emb.weight.grad().tolist();
  CHECK(std::vector<double>(g.begin() + 6, g.begin() + 9) == std::vector<double>{0, 0, 0});
  CHECK(std::vector<double>(g.begin() + 12, g.begin() + 15) == std::vector<double>{2, 2, 2});
  CHECK(std::vector<double>(g.begin() + 3, g.begin() + 6) == std::vector<double>{0, 0, 0});
  CHECK(emb.extra_repr() == "5, 3, padding_idx=2");
}

TEST_CASE("nn layers: Embedding rejects bad sizes and a padding index out of range") {
  CHECK_THROWS_AS(nn::Embedding(5, 3, 5), ValueError);
  CHECK_THROWS_WITH(nn::Embedding(5, 3, 7),
                    Catch::Contains("Embedding") && Catch::Contains("padding_idx"));
  CHECK_THROWS_AS(nn::Embedding(5, 3, -3), ValueError);
  CHECK_THROWS_AS(nn::Embedding(0, 3), ValueError);
  CHECK_THROWS_AS(nn::Embedding(5, 0), ValueError);
  nn::Embedding emb(5, 3);
  CHECK_THROWS_AS(emb(tensor(std::vector<int64_t>{5})), IndexError);
}

TEST_CASE("nn layers: Dropout is the identity in eval and with p = 0") {
  nn::Dropout drop(0.5);
  Tensor x = random_f32({4, 8}, 23);
  Tensor train_out = drop(x);
  std::vector<double> v = x.tolist(), t = train_out.tolist();
  bool some_dropped = false, some_kept = false;
  for (size_t i = 0; i < v.size(); ++i) {
    CHECK((t[i] == 0.0 || t[i] == Approx(2.0 * v[i])));
    some_dropped = some_dropped || t[i] == 0.0;
    some_kept = some_kept || t[i] != 0.0;
  }
  CHECK(some_dropped);
  CHECK(some_kept);
  drop.eval();
  CHECK(drop(x).tolist() == v);
  nn::Dropout none(0.0);
  CHECK(none(x).tolist() == v);
  CHECK_THROWS_AS(nn::Dropout(1.5), ValueError);
  CHECK_THROWS_WITH(nn::Dropout(-0.1), Catch::Contains("Dropout"));
}

TEST_CASE("nn layers: the pools equal their ops, forward and backward") {
  Tensor x = leaf_copy(random_f32({2, 3, 7, 6}, 24));
  Tensor g;
  SECTION("MaxPool2d, stride defaulting to the kernel") {
    nn::MaxPool2d pool({2, 2});
    Tensor y = pool(x);
    CHECK(y.shape() == Shape{2, 3, 3, 3});
    CHECK(y.tolist() == max_pool2d(x, {2, 2}).tolist());
    CHECK(pool.extra_repr() == "kernel_size=(2, 2), stride=(2, 2), padding=(0, 0)");
    CHECK(nn::MaxPool2d(2)(x).tolist() == y.tolist());  // an int means both sides, as PyTorch
    CHECK(max_pool2d(x, 2).tolist() == y.tolist());
    nn::MaxPool2d strided(3, {.stride = 2, .padding = 1, .ceil_mode = true});
    CHECK(strided.extra_repr() ==
          "kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), ceil_mode=True");
    Tensor x2 = leaf_copy(x);
    Tensor ys = strided(x), expected = max_pool2d(x2, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
    CHECK(ys.tolist() == expected.tolist());
    g = random_f32(ys.shape(), 25);
    ys.backward(g);
    expected.backward(g);
    CHECK(x.grad().tolist() == x2.grad().tolist());
  }
  SECTION("AvgPool2d") {
    nn::AvgPool2d pool({3, 2}, {.stride = 2, .padding = {1, 0}});
    Tensor x2 = leaf_copy(x);
    Tensor y = pool(x), expected = avg_pool2d(x2, {3, 2}, {2, 2}, {1, 0});
    CHECK(y.tolist() == expected.tolist());
    g = random_f32(y.shape(), 26);
    y.backward(g);
    expected.backward(g);
    check_close(x.grad(), x2.grad(), tolerance(DType::f32));
    CHECK(nn::AvgPool2d(2)(x).shape() == Shape{2, 3, 3, 3});
  }
  SECTION("AdaptiveAvgPool2d") {
    nn::AdaptiveAvgPool2d pool({1, 1});
    Tensor y = pool(x);
    CHECK(y.shape() == Shape{2, 3, 1, 1});
    check_close(y, x.mean({2, 3}, true), tolerance(DType::f32));
    CHECK(nn::AdaptiveAvgPool2d({3, 4})(x).tolist() == adaptive_avg_pool2d(x, {3, 4}).tolist());
  }
}

TEST_CASE("nn layers: Flatten and Identity") {
  Tensor x = random_f32({2, 3, 4, 5}, 27);
  CHECK(nn::Flatten()(x).shape() == Shape{2, 60});
  CHECK(nn::Flatten(0, 1)(x).shape() == Shape{6, 4, 5});
  CHECK(nn::Flatten(1, 2)(x).tolist() == x.tolist());
  CHECK(nn::Identity()(x).is_same(x));
}

TEST_CASE("nn layers: activations equal their ops") {
  Tensor x = random_f32({3, 5}, 28, -3.0, 3.0);
  CHECK(nn::ReLU()(x).tolist() == relu(x).tolist());
  CHECK(nn::GELU()(x).tolist() == gelu(x).tolist());
  CHECK(nn::GELU("tanh")(x).tolist() == gelu(x, "tanh").tolist());
  CHECK(nn::GELU("tanh")(x).tolist() != gelu(x).tolist());
  CHECK(nn::SiLU()(x).tolist() == silu(x).tolist());
  CHECK(nn::Sigmoid()(x).tolist() == sigmoid(x).tolist());
  CHECK(nn::Tanh()(x).tolist() == tanh(x).tolist());
}

TEST_CASE("nn layers: a small conv net passes gradcheck with respect to its input") {
  auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(2, 3, 3, nn::Conv2dOptions{.padding = 1}),
      std::make_shared<nn::BatchNorm2d>(3), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::AdaptiveAvgPool2d>(Pair{1, 1}), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(3, 4)});
  net->to(DType::f64);
  auto f = [&](const std::vector<Tensor>& in) { return net->forward(in[0]); };
  CHECK_GRADCHECK(f, {random_f64({3, 2, 4, 4}, 29)});
  net->eval();
  CHECK_GRADCHECK(f, {random_f64({2, 2, 4, 4}, 30)});
}

TEST_CASE("nn layers: parameter gradients of a small model match central differences") {
  auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(2, 3, 3, nn::Conv2dOptions{.padding = 1}),
      std::make_shared<nn::BatchNorm2d>(3), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::AdaptiveAvgPool2d>(Pair{1, 1}), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::LayerNorm>(Shape{3}), std::make_shared<nn::Linear>(3, 4)});
  net->to(DType::f64);
  {
    // LayerNorm's weight and bias start at 1 and 0; other values make their gradients less special.
    NoGradGuard no_grad;
    for (auto& [n, p] : net->named_parameters())
      if (n.rfind("5.", 0) == 0) p.copy_(random_f64(p.shape(), 31));
  }
  Tensor x = random_f64({3, 2, 4, 4}, 32);
  Tensor weights = random_f64({3, 4}, 33);
  auto loss = [&]() { return sum(mul(net->forward(x), weights)); };
  loss().backward();
  const double eps = 1e-6;
  for (auto& [n, p] : net->named_parameters()) {
    std::vector<double> analytic = p.grad().tolist();
    Tensor flat = p.detach().view({p.numel()});
    for (int64_t k : {int64_t{0}, p.numel() / 2, p.numel() - 1}) {
      NoGradGuard no_grad;
      Tensor element = flat.select(0, k);
      double saved = element.item<double>();
      element.fill_(saved + eps);
      double plus = loss().item<double>();
      element.fill_(saved - eps);
      double minus = loss().item<double>();
      element.fill_(saved);
      double numeric = (plus - minus) / (2 * eps);
      INFO(n << " element " << k);
      CHECK(std::abs(analytic[k] - numeric) <= 1e-5 + 1e-3 * std::abs(numeric));
    }
  }
}

TEST_CASE("nn layers: Sequential runs its modules in order and indexes them") {
  auto first = std::make_shared<nn::Linear>(3, 4);
  auto second = std::make_shared<nn::Linear>(4, 2);
  nn::Sequential seq;
  seq.push_back(first).push_back(std::make_shared<nn::ReLU>()).push_back(second);
  CHECK(seq.size() == 3);
  CHECK(seq[0].get() == first.get());
  Tensor x = random_f32({5, 3}, 34);
  CHECK(seq(x).tolist() == (*second)(relu((*first)(x))).tolist());
  CHECK_THROWS_AS(seq[3], IndexError);
  CHECK_THROWS_WITH(seq[3], Catch::Contains("Sequential") && Catch::Contains("3"));
  CHECK_THROWS_AS(seq.push_back(nullptr), ValueError);
  CHECK(seq.size() == 3);
  nn::Sequential empty_seq;
  CHECK(empty_seq(x).is_same(x));
}

TEST_CASE("nn layers: ModuleList holds modules under numbered names") {
  nn::ModuleList list;
  list.push_back(std::make_shared<nn::Linear>(2, 2))
      .push_back(std::make_shared<nn::Linear>(2, 1, false));
  CHECK(list.size() == 2);
  std::vector<std::string> names;
  for (auto& [n, p] : list.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "1.weight"});
  int count = 0;
  for (const auto& m : list) count += m->name() == "Linear";
  CHECK(count == 2);
  CHECK_THROWS_AS(list[2], IndexError);
}

TEST_CASE("nn layers: the loss modules equal their ops") {
  Tensor logits = random_f32({4, 3}, 35);
  Tensor target = tensor(std::vector<int64_t>{0, 2, 1, 2});
  nn::CrossEntropyLossOptions options;
  options.label_smoothing = 0.1;
  options.reduction = Reduction::sum;
  CHECK(nn::CrossEntropyLoss(options)(logits, target).item<double>() ==
        cross_entropy(logits, target, Tensor(), -100, Reduction::sum, 0.1).item<double>());
  CHECK(nn::CrossEntropyLoss()(logits, target).item<double>() ==
        cross_entropy(logits, target).item<double>());
  Tensor log_probs = log_softmax(logits, 1);
  Tensor weight = tensor({1.0f, 2.0f, 0.5f});
  CHECK(nn::NLLLoss(weight, 1)(log_probs, target).item<double>() ==
        nll_loss(log_probs, target, weight, 1).item<double>());
  Tensor other = random_f32({4, 3}, 36);
  CHECK(nn::MSELoss()(logits, other).item<double>() == mse_loss(logits, other).item<double>());
  CHECK(nn::MSELoss(Reduction::none)(logits, other).shape() == Shape{4, 3});
}

TEST_CASE("nn init: Linear and Conv2d weights and biases are U(-1/sqrt(fan_in), 1/sqrt(fan_in))") {
  nn::Linear linear_layer(256, 128);
  check_uniform(linear_layer.weight, 1.0 / 16.0);
  Stats b = stats_of(linear_layer.bias);
  CHECK(b.min >= -1.0 / 16.0);
  CHECK(b.max <= 1.0 / 16.0);
  nn::Conv2d conv(16, 64, 3);
  check_uniform(conv.weight, 1.0 / 12.0);
  Stats cb = stats_of(conv.bias);
  CHECK(cb.min >= -1.0 / 12.0);
  CHECK(cb.max <= 1.0 / 12.0);
}

TEST_CASE("nn init: kaiming_normal_ with fan_out has std sqrt(2 / fan_out)") {
  Tensor w = empty({256, 64, 3, 3});
  Generator gen(37);
  nn::init::kaiming_normal_(w, 0.0, "fan_out", "relu", &gen);
  Stats s = stats_of(w);
  CHECK(s.mean == Approx(0.0).margin(1e-3));
  CHECK(s.std == Approx(std::sqrt(2.0 / (256 * 9))).epsilon(0.01));
  nn::init::kaiming_normal_(w, 0.0, "fan_in", "relu", &gen);
  CHECK(stats_of(w).std == Approx(std::sqrt(2.0 / (64 * 9))).epsilon(0.01));
  CHECK_THROWS_AS(nn::init::kaiming_normal_(w, 0.0, "fan_both"), ValueError);
}

TEST_CASE("nn init: kaiming_uniform_ bound is gain * sqrt(3 / fan)") {
  Tensor w = empty({128, 200});
  nn::init::kaiming_uniform_(w, 0.0, "fan_in", "relu");
  check_uniform(w, std::sqrt(2.0) * std::sqrt(3.0 / 200.0));
}

TEST_CASE("nn init: xavier bounds and std") {
  Tensor w = empty({300, 100}, DType::f64);
  nn::init::xavier_uniform_(w, 2.0);
  check_uniform(w, 2.0 * std::sqrt(6.0 / 400.0));
  nn::init::xavier_normal_(w);
  CHECK(stats_of(w).std == Approx(std::sqrt(2.0 / 400.0)).epsilon(0.02));
  Tensor conv_w = empty({32, 16, 3, 3});
  nn::init::xavier_uniform_(conv_w);
  check_uniform(conv_w, std::sqrt(6.0 / ((16 + 32) * 9)));
}

TEST_CASE("nn init: calculate_gain matches torch.nn.init") {
  CHECK(nn::init::calculate_gain("linear") == 1.0);
  CHECK(nn::init::calculate_gain("conv1d") == 1.0);
  CHECK(nn::init::calculate_gain("conv2d") == 1.0);
  CHECK(nn::init::calculate_gain("conv_transpose2d") == 1.0);
  CHECK(nn::init::calculate_gain("sigmoid") == 1.0);
  CHECK(nn::init::calculate_gain("tanh") == Approx(5.0 / 3.0));
  CHECK(nn::init::calculate_gain("relu") == Approx(std::sqrt(2.0)));
  CHECK(nn::init::calculate_gain("leaky_relu") == Approx(std::sqrt(2.0 / (1.0 + 0.01 * 0.01))));
  CHECK(nn::init::calculate_gain("leaky_relu", 0.2) == Approx(std::sqrt(2.0 / 1.04)));
  CHECK(nn::init::calculate_gain("selu") == Approx(0.75));
  CHECK_THROWS_AS(nn::init::calculate_gain("swish"), ValueError);
  CHECK_THROWS_WITH(nn::init::calculate_gain("swish"), Catch::Contains("swish"));
}

TEST_CASE("nn init: fans, constants, and reproducibility with a generator") {
  Tensor w = empty({8, 4, 3, 2});
  CHECK(nn::init::fans(w) == std::pair<int64_t, int64_t>{24, 48});
  Tensor v = empty({5});
  CHECK_THROWS_AS(nn::init::fans(v), ShapeError);
  CHECK_THROWS_AS(nn::init::xavier_uniform_(v), ShapeError);
  nn::init::constant_(v, 0.25);
  CHECK(v.tolist() == std::vector<double>(5, 0.25));
  nn::init::ones_(v);
  CHECK(v.tolist() == std::vector<double>(5, 1.0));
  nn::init::zeros_(v);
  CHECK(v.tolist() == std::vector<double>(5, 0.0));
  Tensor a = empty({4, 4}), b = empty({4, 4});
  Generator g1(7), g2(7);
  nn::init::normal_(a, 1.0, 0.5, &g1);
  nn::init::normal_(b, 1.0, 0.5, &g2);
  CHECK(a.tolist() == b.tolist());
  // Filling a parameter records no history and keeps it a leaf.
  nn::Linear layer(3, 3);
  nn::init::xavier_normal_(layer.weight);
  CHECK(layer.weight.is_leaf());
  CHECK(layer.weight.requires_grad());
}
