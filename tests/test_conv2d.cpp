#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cpu_isa_scope.h"
#include "gradcheck.h"
#include "kiln/core/backends.h"
#include "kiln/kernels/conv2d_graph_plan.h"
#include "kiln/kernels/copy.h"
#include "kiln/kernels/cpu/conv2d/choice.h"
#include "kiln/kernels/cpu/conv2d/onednn.h"
#include "kiln/kiln.h"
#include "kiln/ops/conv.h"
#include "parity.h"
#include "temp_dir.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::non_contiguous;
using kiln::testing::random_f64;
using kiln::testing::tolerance;

namespace {

struct Conv {
  Pair stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

// Sizes of x [N, C, H, W] and weight [O, C/groups, kH, kW] with the output sizes they give.
struct Sizes {
  int64_t N, C, H, W, O, Cg, Og, kH, kW, OH, OW;
};

Sizes sizes_of(const Shape& x, const Shape& w, const Conv& p) {
  Sizes s{x[0], x[1], x[2], x[3], w[0], w[1], w[0] / p.groups, w[2], w[3], 0, 0};
  s.OH = (s.H + 2 * p.padding[0] - p.dilation[0] * (s.kH - 1) - 1) / p.stride[0] + 1;
  s.OW = (s.W + 2 * p.padding[1] - p.dilation[1] * (s.kW - 1) - 1) / p.stride[1] + 1;
  return s;
}

// Calls fn(x index, weight index, output index) for every term of the convolution sum: the
// direct seven loops every reference below is built on.
template <class F>
void for_each_term(const Sizes& s, const Conv& p, F&& fn) {
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t o = 0; o < s.O; ++o)
      for (int64_t oh = 0; oh < s.OH; ++oh)
        for (int64_t ow = 0; ow < s.OW; ++ow)
          for (int64_t c = 0; c < s.Cg; ++c)
            for (int64_t ki = 0; ki < s.kH; ++ki)
              for (int64_t kj = 0; kj < s.kW; ++kj) {
                const int64_t ih = oh * p.stride[0] - p.padding[0] + ki * p.dilation[0];
                const int64_t iw = ow * p.stride[1] - p.padding[1] + kj * p.dilation[1];
                if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                const int64_t channel = (o / s.Og) * s.Cg + c;
                fn(((n * s.C + channel) * s.H + ih) * s.W + iw,
                   ((o * s.Cg + c) * s.kH + ki) * s.kW + kj,
                   ((n * s.O + o) * s.OH + oh) * s.OW + ow);
              }
}

std::vector<double> reference_conv(const Tensor& x, const Tensor& w, const Tensor& bias,
                                   const Conv& p) {
  const Sizes s = sizes_of(x.shape(), w.shape(), p);
  const std::vector<double> xv = x.tolist(), wv = w.tolist();
  std::vector<double> out(s.N * s.O * s.OH * s.OW, 0.0);
  if (bias.defined()) {
    const std::vector<double> bv = bias.tolist();
    for (size_t i = 0; i < out.size(); ++i) out[i] = bv[(i / (s.OH * s.OW)) % s.O];
  }
  for_each_term(s, p, [&](int64_t xi, int64_t wi, int64_t oi) { out[oi] += xv[xi] * wv[wi]; });
  return out;
}

Tensor random(const Shape& shape, uint64_t seed, DType dtype = DType::f64) {
  return random_f64(shape, seed).to(dtype);
}

void check_conv(const Shape& xs, const Shape& ws, const Conv& p, bool with_bias, DType dtype,
                uint64_t seed) {
  INFO("x " << shape_str(xs) << " w " << shape_str(ws) << " stride " << p.stride[0] << ","
            << p.stride[1] << " padding " << p.padding[0] << "," << p.padding[1] << " dilation "
            << p.dilation[0] << "," << p.dilation[1] << " groups " << p.groups << " bias "
            << with_bias << " " << dtype_name(dtype));
  Tensor x = random(xs, seed, dtype), w = random(ws, seed + 1, dtype);
  Tensor bias = with_bias ? random({ws[0]}, seed + 2, dtype) : Tensor();
  Tensor out = conv2d(x, w, bias, p.stride, p.padding, p.dilation, p.groups);
  const Sizes s = sizes_of(xs, ws, p);
  REQUIRE(out.shape() == Shape{s.N, s.O, s.OH, s.OW});
  CHECK(out.dtype() == dtype);
  check_close(out, reference_conv(x, w, bias, p), tolerance(dtype));
}

const DType kFloatTypes[] = {DType::f32, DType::f64};

// A weight's gradient sums up to 9 * 28 * 28 f32 products below, so its rounding error grows past
// the forward's: ten times the f32 floor. An indexing mistake would still be off by whole products.
constexpr double kLongSumFactor = 10.0;

// Gradients of sum(conv(x, w) * r) by the direct loops, for x and w.
struct ReferenceGrads {
  std::vector<double> x, w;
};

ReferenceGrads reference_grads(const Tensor& x, const Tensor& w, const Tensor& r, const Conv& p) {
  const Sizes s = sizes_of(x.shape(), w.shape(), p);
  const std::vector<double> xv = x.tolist(), wv = w.tolist(), rv = r.tolist();
  ReferenceGrads g{std::vector<double>(xv.size(), 0.0), std::vector<double>(wv.size(), 0.0)};
  for_each_term(s, p, [&](int64_t xi, int64_t wi, int64_t oi) {
    g.x[xi] += rv[oi] * wv[wi];
    g.w[wi] += rv[oi] * xv[xi];
  });
  return g;
}

auto conv_fn(const Conv& p) {
  return [p](const std::vector<Tensor>& in) {
    return conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), p.stride, p.padding, p.dilation,
                  p.groups);
  };
}

}  // namespace

TEST_CASE("conv2d: 3x3 matches the direct loops") {
  for (DType t : kFloatTypes) {
    check_conv({2, 3, 7, 6}, {4, 3, 3, 3}, {}, true, t, 1);
    check_conv({2, 3, 7, 6}, {4, 3, 3, 3}, {}, false, t, 4);
  }
}

TEST_CASE("conv2d: stride, padding and dilation combinations") {
  const Conv combos[] = {
      {{2, 2}, {1, 1}, {1, 1}, 1}, {{1, 1}, {2, 2}, {1, 1}, 1}, {{1, 1}, {0, 0}, {2, 2}, 1},
      {{2, 1}, {1, 0}, {1, 2}, 1}, {{3, 2}, {2, 3}, {2, 1}, 1}, {{2, 2}, {0, 0}, {1, 1}, 1},
  };
  uint64_t seed = 10;
  for (const Conv& p : combos)
    for (DType t : kFloatTypes) check_conv({2, 3, 9, 8}, {5, 3, 3, 2}, p, true, t, seed += 3);
}

TEST_CASE("conv2d: groups") {
  for (DType t : kFloatTypes) {
    check_conv({2, 4, 6, 6}, {6, 2, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2}, true, t, 40);
    check_conv({2, 6, 7, 5}, {3, 2, 3, 3}, {{2, 1}, {1, 2}, {2, 1}, 3}, false, t, 43);
  }
}

TEST_CASE("conv2d: depthwise, with and without a channel multiplier") {
  for (DType t : kFloatTypes) {
    check_conv({2, 4, 8, 8}, {4, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 4}, true, t, 50);
    check_conv({2, 3, 8, 7}, {6, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 3}, true, t, 53);
  }
}

TEST_CASE("conv2d: 1x1 kernels, pointwise and strided") {
  for (DType t : kFloatTypes) {
    check_conv({2, 5, 6, 7}, {3, 5, 1, 1}, {}, true, t, 60);
    check_conv({2, 5, 6, 7}, {3, 5, 1, 1}, {{2, 2}, {0, 0}, {1, 1}, 1}, false, t, 63);
    check_conv({2, 4, 6, 7}, {4, 2, 1, 1}, {{1, 1}, {0, 0}, {1, 1}, 2}, true, t, 66);
  }
}

TEST_CASE("conv2d: kernel as large as the padded input") {
  check_conv({1, 2, 3, 4}, {2, 2, 5, 4}, {{1, 1}, {1, 0}, {1, 1}, 1}, true, DType::f64, 70);
  check_conv({1, 1, 1, 1}, {1, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, false, DType::f64, 73);
}

TEST_CASE("conv2d: a batch split across threads and a single large image") {
  for (DType t : kFloatTypes) {
    check_conv({6, 8, 12, 12}, {16, 8, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true, t, 80);
    check_conv({1, 16, 20, 20}, {32, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true, t, 83);
  }
}

TEST_CASE("conv2d: non-contiguous input, weight and bias") {
  Tensor x = random({3, 2, 6, 5}, 90).transpose(0, 1);  // [2, 3, 6, 5]
  Tensor w = non_contiguous(random({4, 3, 3, 3}, 91));
  Tensor bias = non_contiguous(random({4}, 92));
  Conv p{{1, 2}, {1, 1}, {1, 1}, 1};
  Tensor out = conv2d(x, w, bias, p.stride, p.padding, p.dilation, p.groups);
  check_close(out, reference_conv(x, w, bias, p), tolerance(DType::f64));
}

TEST_CASE("conv2d: zero-size batch and channels, in every dtype") {
  // Each output, input gradient or weight gradient below is an empty sum (plus the bias), so it
  // must be written even though no kernel runs: a freed buffer of the same size, full of 7s, is
  // likely to be handed out again and would show through.
  auto stale = [](const Shape& shape, DType dtype) { full(shape, 7.0, dtype); };
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    Tensor out = conv2d(zeros({0, 3, 5, 5}, dtype), zeros({4, 3, 3, 3}, dtype));
    CHECK(out.shape() == Shape{0, 4, 3, 3});

    // No input channel: the output is the bias alone.
    stale({1, 2, 2, 2}, dtype);
    Tensor bias = tensor({1.0, 2.0}).to(dtype);
    Tensor no_channels = conv2d(zeros({1, 0, 4, 4}, dtype), zeros({2, 0, 3, 3}, dtype), bias);
    CHECK(no_channels.shape() == Shape{1, 2, 2, 2});
    CHECK(no_channels.tolist() == std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2});
    stale({1, 2, 2, 2}, dtype);
    CHECK(conv2d(zeros({1, 0, 4, 4}, dtype), zeros({2, 0, 3, 3}, dtype)).tolist() ==
          std::vector<double>(8, 0.0));

    // No output channel: a zero input gradient.
    stale({2, 3, 5, 5}, dtype);
    Tensor grad_x = conv2d_backward_input(zeros({2, 0, 5, 5}, dtype), zeros({0, 3, 3, 3}, dtype),
                                          {2, 3, 5, 5}, {1, 1}, {1, 1}, {1, 1}, 1);
    CHECK(grad_x.tolist() == std::vector<double>(150, 0.0));

    // An empty batch: a zero weight gradient, through autograd as well.
    stale({3, 2, 3, 3}, dtype);
    Tensor x = zeros({0, 2, 4, 4}, dtype).requires_grad_();
    Tensor w = ones({3, 2, 3, 3}, dtype).requires_grad_();
    Tensor b = ones({3}, dtype).requires_grad_();
    sum(conv2d(x, w, b)).backward();
    CHECK(x.grad().shape() == Shape{0, 2, 4, 4});
    CHECK(w.grad().tolist() == std::vector<double>(54, 0.0));
    CHECK(b.grad().tolist() == std::vector<double>(3, 0.0));
  }
}

TEST_CASE("conv2d: an image of zero height or width is a ShapeError, even with padding") {
  // PyTorch refuses these ("Only zero batch or zero channel inputs are supported"); padding would
  // otherwise give the empty image an output made of padding alone.
  Tensor w = ones({8, 3, 1, 1});
  CHECK_THROWS_WITH(conv2d(zeros({1, 3, 0, 4}), w, Tensor(), {1, 1}, {1, 0}),
                    Catch::Contains("conv2d: only an empty batch or zero channels") &&
                        Catch::Contains("[1, 3, 0, 4]"));
  CHECK_THROWS_AS(conv2d(zeros({1, 3, 4, 0}), w, Tensor(), {1, 1}, {0, 1}), ShapeError);
  CHECK_THROWS_AS(conv2d_backward_input(zeros({1, 8, 2, 4}), w, {1, 3, 0, 4}, {1, 1}, {1, 0}),
                  ShapeError);
  CHECK_THROWS_AS(
      conv2d_backward_weight(zeros({1, 8, 2, 4}), zeros({1, 3, 0, 4}), w.shape(), {1, 1}, {1, 0}),
      ShapeError);
  // An empty batch or no channel may come with an empty image, as in PyTorch.
  CHECK(conv2d(zeros({0, 3, 0, 4}), w, Tensor(), {1, 1}, {1, 0}).shape() == Shape{0, 8, 2, 4});
  Tensor bias_only =
      conv2d(zeros({1, 0, 0, 4}), ones({2, 0, 1, 1}), tensor({1.0f, 2.0f}), {1, 1}, {1, 0});
  CHECK(bias_only.tolist() == std::vector<double>{1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2});
}

TEST_CASE("conv2d: a kernel of size zero is a ShapeError") {
  CHECK_THROWS_WITH(conv2d(zeros({1, 2, 4, 4}), zeros({3, 2, 0, 3})),
                    Catch::Contains("conv2d: expected a kernel of at least 1x1") &&
                        Catch::Contains("[3, 2, 0, 3]"));
}

TEST_CASE("conv2d: 16-bit floats compute in f32") {
  Tensor x = random({1, 2, 5, 5}, 100, DType::f32), w = random({3, 2, 3, 3}, 101, DType::f32);
  for (DType t : {DType::f16, DType::bf16}) {
    Tensor x16 = x.to(t), w16 = w.to(t);
    Tensor out = conv2d(x16, w16, Tensor(), {1, 1}, {1, 1});
    CHECK(out.dtype() == t);
    Conv p{{1, 1}, {1, 1}, {1, 1}, 1};
    check_close(out, reference_conv(x16.to(DType::f64), w16.to(DType::f64), Tensor(), p),
                tolerance(t));
  }
}

TEST_CASE("conv2d: gradcheck plain and padded") {
  CHECK_GRADCHECK(conv_fn({}), {random_f64({2, 2, 4, 4}, 110), random_f64({3, 2, 3, 3}, 111),
                                random_f64({3}, 112)});
  CHECK_GRADCHECK(
      conv_fn({{1, 1}, {1, 2}, {1, 1}, 1}),
      {random_f64({1, 2, 4, 3}, 113), random_f64({2, 2, 3, 2}, 114), random_f64({2}, 115)});
}

TEST_CASE("conv2d: gradcheck strided and dilated") {
  CHECK_GRADCHECK(
      conv_fn({{2, 2}, {1, 1}, {1, 1}, 1}),
      {random_f64({2, 2, 5, 5}, 120), random_f64({2, 2, 3, 3}, 121), random_f64({2}, 122)});
  CHECK_GRADCHECK(conv_fn({{1, 2}, {2, 1}, {2, 2}, 1}),
                  {random_f64({1, 2, 5, 6}, 123), random_f64({2, 2, 2, 3}, 124)});
}

TEST_CASE("conv2d: gradcheck groups and depthwise") {
  CHECK_GRADCHECK(
      conv_fn({{1, 1}, {1, 1}, {1, 1}, 2}),
      {random_f64({2, 4, 4, 4}, 130), random_f64({4, 2, 3, 3}, 131), random_f64({4}, 132)});
  CHECK_GRADCHECK(
      conv_fn({{2, 2}, {1, 1}, {1, 1}, 3}),
      {random_f64({1, 3, 5, 5}, 133), random_f64({6, 1, 3, 3}, 134), random_f64({6}, 135)});
}

TEST_CASE("conv2d: gradcheck 1x1 kernels") {
  CHECK_GRADCHECK(conv_fn({}), {random_f64({2, 3, 3, 3}, 140), random_f64({2, 3, 1, 1}, 141),
                                random_f64({2}, 142)});
  CHECK_GRADCHECK(conv_fn({{2, 2}, {0, 0}, {1, 1}, 1}),
                  {random_f64({2, 3, 4, 4}, 143), random_f64({2, 3, 1, 1}, 144)});
}

TEST_CASE("conv2d: backward matches the direct loops on a batch split across threads") {
  struct Case {
    Conv p;
    int64_t kernel;
  };
  for (const Case& c :
       {Case{{{1, 1}, {1, 1}, {1, 1}, 1}, 3}, Case{{{2, 1}, {0, 2}, {1, 2}, 2}, 3}, Case{{}, 1}}) {
    const Conv& p = c.p;
    const int64_t k = c.kernel;
    Tensor x = random_f64({6, 8, 10, 9}, 150).requires_grad_();
    Tensor w = random_f64({12, 8 / p.groups, k, k}, 151).requires_grad_();
    Tensor b = random_f64({12}, 152).requires_grad_();
    Tensor out = conv2d(x, w, b, p.stride, p.padding, p.dilation, p.groups);
    Tensor r = random_f64(out.shape(), 153);
    sum(mul(out, r)).backward();
    ReferenceGrads want = reference_grads(x, w, r, p);
    check_close(x.grad(), want.x, tolerance(DType::f64));
    check_close(w.grad(), want.w, tolerance(DType::f64));
    check_close(b.grad(), sum(r, {0, 2, 3}).tolist(), tolerance(DType::f64));
  }
}

TEST_CASE("conv2d: images batched into one product, with a single image left over") {
  // 8 channels x 3x3 x 30x30 positions: two images fill the CPU kernel's column budget, so a batch
  // of 5 runs as chunks of 2 with one image alone, whatever the thread count.
  Conv p{{1, 1}, {1, 1}, {1, 1}, 1};
  Tensor x = random_f64({5, 8, 30, 30}, 170).requires_grad_();
  Tensor w = random_f64({6, 8, 3, 3}, 171).requires_grad_();
  Tensor b = random_f64({6}, 172).requires_grad_();
  Tensor out = conv2d(x, w, b, p.stride, p.padding, p.dilation, p.groups);
  check_close(out, reference_conv(x, w, b, p), tolerance(DType::f64));
  Tensor r = random_f64(out.shape(), 173);
  sum(mul(out, r)).backward();
  ReferenceGrads want = reference_grads(x, w, r, p);
  check_close(x.grad(), want.x, tolerance(DType::f64));
  check_close(w.grad(), want.w, tolerance(DType::f64));
  check_close(b.grad(), sum(r, {0, 2, 3}).tolist(), tolerance(DType::f64));
}

namespace {

// f32 convolutions run on the padded-layout kernels of kernels/cpu/conv2d/direct.cpp, whose
// micro-kernels exist once per instruction set (core/cpu_isa.h): each set runs these cases. The
// shapes cover output-channel counts that leave part of a tile's rows, odd tap counts, pads
// narrower and wider than the kernel's reach, dilation, groups, batches that fill several chunks
// with one image left over, a single image split across threads, and strides 2 and 3 (phase planes,
// one of them shorter when the size is odd; a 1x1 stride-2 kernel that reads only one phase).
// `all_shapes` false leaves out the three large shapes (several chunks, one image split across
// threads), whose code, the driver, every instruction set shares: they run once, with the CPU's
// best kernels, and the other sets get the odd shapes, in a fraction of the time.
void check_cases(DType dtype, bool all_shapes) {
  struct Case {
    Shape x, w;
    Conv p;
  };
  const Case cases[] = {
      {{3, 5, 9, 11}, {6, 5, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {{9, 16, 28, 28}, {16, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {{5, 3, 7, 7}, {7, 3, 1, 1}, {}},
      {{2, 4, 8, 6}, {5, 4, 5, 3}, {{1, 1}, {2, 1}, {1, 1}, 1}},
      {{2, 4, 9, 9}, {4, 4, 3, 3}, {{1, 1}, {2, 2}, {2, 2}, 1}},
      {{3, 2, 6, 7}, {2, 2, 3, 3}, {}},
      {{2, 3, 6, 5}, {3, 3, 3, 3}, {{1, 1}, {1, 0}, {1, 1}, 1}},
      {{2, 6, 8, 8}, {4, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2}},
      {{2, 6, 7, 7}, {6, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 6}},
      {{2, 3, 4, 4}, {2, 3, 6, 6}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {{1, 8, 20, 20}, {12, 8, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {{3, 5, 9, 11}, {6, 5, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}},
      {{4, 16, 28, 28}, {32, 16, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}},
      {{4, 16, 14, 14}, {32, 16, 1, 1}, {{2, 2}, {0, 0}, {1, 1}, 1}},
      {{2, 3, 9, 8}, {5, 3, 3, 2}, {{2, 1}, {0, 2}, {1, 2}, 1}},
      {{2, 3, 10, 9}, {4, 3, 2, 2}, {{3, 3}, {0, 1}, {1, 1}, 1}},
      {{2, 3, 5, 6}, {4, 3, 1, 1}, {{1, 2}, {1, 1}, {1, 1}, 1}},
      {{2, 4, 8, 7}, {4, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 4}},
      // Enough output channels for channel tiles in every set (at least 2 vectors: 8, 16 or 32
      // channels), with a last block of one vector and one part-filled: 40 and 36 channels a
      // group; rows longer than a tile's positions (31 columns: 3 runs of 11 or fewer); an odd
      // row width for bf16's pairs of positions; a stride.
      {{2, 3, 6, 7}, {40, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {{2, 4, 5, 5}, {72, 2, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2}},
      {{1, 2, 3, 31}, {33, 2, 1, 3}, {{1, 1}, {0, 1}, {1, 1}, 1}},
      {{2, 3, 9, 9}, {34, 3, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}},
      // Shapes the oneDNN rule (kernels/cpu/conv2d/onednn.cpp) sends to oneDNN: ResNet's 14x14
      // and 7x7 layers, and wide layers with dilation, groups, uneven padding and odd sizes.
      {{2, 32, 14, 14}, {32, 32, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {{2, 32, 7, 7}, {24, 32, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {{2, 64, 11, 9}, {64, 32, 3, 3}, {{1, 1}, {2, 1}, {2, 2}, 2}},
      {{3, 18, 10, 13}, {20, 18, 3, 5}, {{2, 1}, {0, 2}, {1, 1}, 1}},
  };
  uint64_t seed = 300;
  for (const Case& c : cases) {
    if (!all_shapes && c.x[0] * c.x[1] * c.x[2] * c.x[3] >= 3200) continue;
    INFO("x " << shape_str(c.x) << " w " << shape_str(c.w) << " padding " << c.p.padding[0] << ","
              << c.p.padding[1] << " dilation " << c.p.dilation[0] << "," << c.p.dilation[1]
              << " groups " << c.p.groups);
    for (bool with_bias : {true, false}) {
      Tensor x = random(c.x, seed++, dtype).requires_grad_();
      Tensor w = random(c.w, seed++, dtype).requires_grad_();
      Tensor b = with_bias ? random({c.w[0]}, seed++, dtype) : Tensor();
      Tensor out = conv2d(x, w, b, c.p.stride, c.p.padding, c.p.dilation, c.p.groups);
      REQUIRE(out.dtype() == dtype);
      check_close(out, reference_conv(x, w, b, c.p), tolerance(dtype));
      Tensor r = random(out.shape(), seed++, dtype);
      sum(mul(out, r)).backward();
      ReferenceGrads want = reference_grads(x, w, r, c.p);
      check_close(x.grad(), want.x, tolerance(dtype));
      check_close(w.grad(), want.w, tolerance(dtype).times(kLongSumFactor));
    }
  }
}

// Runs the cases in `dtype` with kiln's kernels of `isa` (oneDNN off), or says why not: a set this
// CPU cannot run is reported skipped (ctest SKIP), never passed.
void check_cases_with(CpuIsa isa, DType dtype = DType::f32) {
  // f32 has no kernels past AVX-512's: on an AVX512-BF16 CPU its best set is AVX-512.
  const CpuIsa best =
      dtype == DType::f32 ? std::min(cpu_isa_supported(), CpuIsa::avx512) : cpu_isa_supported();
  const backends::OneDnnScope kiln_only(false);
  testing::with_cpu_isa(isa, [&] { check_cases(dtype, isa == best); });
}

// Whether this build and CPU can run oneDNN's passes in `dtype`; WARNs "SKIPPED: ..." when not.
bool onednn_runs_here(DType dtype) {
  if (!backends::onednn_available()) {
    WARN("SKIPPED: this build has no oneDNN (KILN_ONEDNN, Debian's libdnnl-dev)");
    return false;
  }
  const CpuIsa needs = dtype == DType::bf16 ? CpuIsa::avx512_bf16 : CpuIsa::avx2;
  if (cpu_isa() < needs) {
    WARN("SKIPPED: oneDNN takes no " << dtype_name(dtype) << " convolution at "
                                     << cpu_isa_name(cpu_isa()) << " (needs " << cpu_isa_name(needs)
                                     << ")");
    return false;
  }
  return true;
}

// Runs fn with oneDNN on, at the level the program started with (the CPU's best, or what
// KILN_CPU_ISA says: ctest's test_conv2d_onednn_avx2 runs these cases capped, and oneDNN takes its
// cap from kiln's on its first use), and requires that oneDNN ran at least one pass.
template <class F>
void with_onednn(F&& fn) {
  const backends::OneDnnScope on(true);
  const int64_t before = backends::onednn_conv2d_runs();
  fn();
  CHECK(backends::onednn_conv2d_runs() > before);
}

}  // namespace

TEST_CASE("conv2d: f32 forward and gradients match the direct loops, portable kernels") {
  check_cases_with(CpuIsa::baseline);
}

TEST_CASE("conv2d: f32 forward and gradients match the direct loops, AVX2 kernels", "[may_skip]") {
  check_cases_with(CpuIsa::avx2);
}

TEST_CASE("conv2d: f32 forward and gradients match the direct loops, AVX-512 kernels",
          "[may_skip]") {
  check_cases_with(CpuIsa::avx512);
}

// bf16 on the CPU: with AVX512-BF16 the bf16 kernels (pairs of channels, vdpbf16ps; groups > 1 go
// through f32), without it f32 copies; either way f32 sums rounded once to bf16.
TEST_CASE("conv2d: bf16 forward and gradients match the direct loops, AVX512-BF16 kernels",
          "[may_skip]") {
  check_cases_with(CpuIsa::avx512_bf16, DType::bf16);
}

TEST_CASE("conv2d: bf16 forward and gradients match the direct loops, through f32") {
  check_cases_with(CpuIsa::baseline, DType::bf16);
}

// oneDNN's passes (kernels/cpu/conv2d/onednn.cpp) against the same loops, on the shapes its rule
// gives it (the cases above mix them with shapes kiln's kernels keep).
TEST_CASE("conv2d: oneDNN's f32 passes match the direct loops", "[may_skip]") {
  if (!onednn_runs_here(DType::f32)) return;
  with_onednn([] { check_cases(DType::f32, true); });
}

TEST_CASE("conv2d: oneDNN's bf16 passes match the direct loops", "[may_skip]") {
  if (!onednn_runs_here(DType::bf16)) return;
  with_onednn([] { check_cases(DType::bf16, true); });
}

// Which passes oneDNN takes: one call of each, the run counter read around it.
TEST_CASE("conv2d: the oneDNN rule, its switch and kiln's ISA cap", "[may_skip]") {
  if (!onednn_runs_here(DType::f32)) return;
  const Conv p{{1, 1}, {1, 1}, {1, 1}, 1};
  auto ran = [](auto&& call) {
    const int64_t before = backends::onednn_conv2d_runs();
    call();
    return backends::onednn_conv2d_runs() - before;
  };
  auto passes = [&](const Shape& xs, const Shape& ws, const Conv& c) {
    const Tensor x = random(xs, 510, DType::f32), w = random(ws, 511, DType::f32);
    const Tensor out = conv2d(x, w, Tensor(), c.stride, c.padding, c.dilation, c.groups);
    const Tensor g = random(out.shape(), 512, DType::f32);
    return std::array<int64_t, 3>{
        ran([&] { conv2d(x, w, Tensor(), c.stride, c.padding, c.dilation, c.groups); }), ran([&] {
          conv2d_backward_input(g, w, x.shape(), c.stride, c.padding, c.dilation, c.groups);
        }),
        ran([&] {
          conv2d_backward_weight(g, x, w.shape(), c.stride, c.padding, c.dilation, c.groups);
        })};
  };
  const backends::OneDnnScope on(true);
  const bool avx512 = cpu_isa() >= CpuIsa::avx512;
  using Runs = std::array<int64_t, 3>;
  // A wide 3x3 layer: forward and input gradient; the weight gradient on AVX-512 only.
  CHECK(passes({2, 32, 8, 8}, {32, 32, 3, 3}, p) == Runs{1, 1, avx512 ? 1 : 0});
  // Dilated, grouped and unevenly padded, odd sizes: oneDNN's too (a mistake in the sizes handed
  // to oneDNN would make it refuse the problem, and kiln's kernels would quietly run it instead).
  // Channels a group are a multiple of 16: oneDNN 2.6 runs 20 with its GEMM code, left to kiln.
  CHECK(passes({2, 64, 11, 9}, {64, 32, 3, 3}, Conv{{1, 1}, {2, 1}, {2, 2}, 2}) ==
        Runs{1, 1, avx512 ? 1 : 0});
  // A narrow one (16 channels, stride 1): the forward stays with kiln, and on AVX-512 the input
  // gradient too.
  CHECK(passes({2, 16, 8, 8}, {16, 16, 3, 3}, p) == Runs{0, avx512 ? 0 : 1, avx512 ? 1 : 0});
  // Strided, it is oneDNN's.
  CHECK(passes({2, 16, 8, 8}, {16, 16, 3, 3}, Conv{{2, 2}, {1, 1}, {1, 1}, 1})[0] == 1);
  // 1x1 kernels are oneDNN's in f32 (bf16 ones on at most 64 channels stay with kiln).
  CHECK(passes({2, 32, 8, 8}, {32, 32, 1, 1}, Conv{}) == Runs{1, 1, avx512 ? 1 : 0});
  {
    const backends::OneDnnScope off(false);
    CHECK(passes({2, 32, 8, 8}, {32, 32, 3, 3}, p) == Runs{0, 0, 0});
  }
  // Under a lower ISA cap than oneDNN's, kiln's kernels of that level run.
  if (cpu_isa() > CpuIsa::avx2) {
    testing::with_cpu_isa(CpuIsa::avx2, [&] {
      CHECK(passes({2, 32, 8, 8}, {32, 32, 3, 3}, p) == Runs{0, 0, 0});
    });
  }
}

namespace {

// The dtypes the CPU's implementations differ in here: f32, and bf16 where kiln has bf16 kernels.
std::vector<DType> choice_dtypes() {
  std::vector<DType> dtypes{DType::f32};
  if (cpu_isa() >= CpuIsa::avx512_bf16) dtypes.push_back(DType::bf16);
  return dtypes;
}

// The implementation the test clock makes fastest; the others take twice as long (within the
// autotuner's drop factor, so all of them run every round).
cpu::Conv2dImpl clock_winner = cpu::Conv2dImpl::direct;
double winner_fastest(cpu::Conv2dImpl impl, double) {
  return impl == clock_winner ? 1.0 : 2.0;
}

// Autotuning with the test clock for the scope, the choices forgotten before and after.
struct RiggedAutotune {
  explicit RiggedAutotune(cpu::Conv2dImpl winner) : pick(backends::CpuConv::autotune) {
    clock_winner = winner;
    cpu::clear_conv2d_choices();
    cpu::set_conv2d_test_clock(winner_fastest);
  }
  ~RiggedAutotune() {
    cpu::set_conv2d_test_clock(nullptr);
    cpu::clear_conv2d_choices();
  }
  backends::CpuConvScope pick;
};

}  // namespace

// Every implementation the CPU may run, forced wherever it can run, against the direct loops on
// the odd shapes: oneDNN on every shape it has a JIT kernel for (the rule gives it only some),
// kiln's direct kernels, im2col + GEMM in f32 (f64's only implementation, tested above).
TEST_CASE("conv2d: each CPU implementation, forced, matches the direct loops") {
  const std::pair<backends::CpuConv, cpu::Conv2dImpl> forced[] = {
      {backends::CpuConv::onednn, cpu::Conv2dImpl::onednn},
      {backends::CpuConv::direct, cpu::Conv2dImpl::direct},
      {backends::CpuConv::im2col, cpu::Conv2dImpl::im2col}};
  for (const auto& [pick, impl] : forced)
    for (DType dtype : choice_dtypes()) {
      if (impl == cpu::Conv2dImpl::im2col && dtype != DType::f32) continue;
      if (impl == cpu::Conv2dImpl::onednn && !onednn_runs_here(dtype)) continue;
      INFO(backends::cpu_conv_name(pick) << " " << dtype_name(dtype));
      const backends::CpuConvScope scope(pick);
      const int64_t before = cpu::conv2d_runs(impl);
      check_cases(dtype, false);
      CHECK(cpu::conv2d_runs(impl) > before);
    }
}

// oneDNN's weight gradient reads the blocked copy of grad_output its input gradient made just
// before (kernels/cpu/conv2d/onednn.cpp), and only while that copy is the tensor's: after an
// in-place change of grad_output, or for another tensor at the same address, it reorders again.
TEST_CASE("conv2d: oneDNN's weight gradient reuses grad_output's blocked copy only while it holds",
          "[may_skip]") {
  for (DType dtype : choice_dtypes()) {
    if (!onednn_runs_here(dtype)) continue;
    INFO(dtype_name(dtype));
    const backends::CpuConvScope scope(backends::CpuConv::onednn);
    const Conv p{{1, 1}, {1, 1}, {1, 1}, 1};
    const Tensor x = random({2, 32, 14, 14}, 170, dtype), w = random({32, 32, 3, 3}, 171, dtype);
    const auto weight_grad = [&](const Tensor& g) {
      return conv2d_backward_weight(g, x, w.shape(), p.stride, p.padding);
    };
    const auto check_weight_grad = [&](const Tensor& g) {
      check_close(weight_grad(g), reference_grads(x, w, g, p).w,
                  tolerance(dtype).times(kLongSumFactor));
    };
    const int64_t before = cpu::conv2d_runs(cpu::Conv2dImpl::onednn);
    Tensor g = random({2, 32, 14, 14}, 172, dtype);
    conv2d_backward_input(g, w, x.shape(), p.stride, p.padding);
    check_weight_grad(g);  // the copy reused
    conv2d_backward_input(g, w, x.shape(), p.stride, p.padding);
    g.mul_(-3.0);  // a new version: the copy no longer holds
    check_weight_grad(g);
    // Two tensors of the same version, the second at the first's address once it is freed.
    const Tensor values = random({2, 32, 14, 14}, 173, dtype);
    Tensor first = empty_like(values);
    const void* address = first.data_ptr();
    conv2d_backward_input(first, w, x.shape(), p.stride, p.padding);
    first = Tensor();
    Tensor second = empty_like(values);
    CopyKernels::cpu.copy(values, second);
    REQUIRE(second.version() == 0);
    // An allocator that holds freed blocks back (AddressSanitizer's) gives another address.
    if (second.data_ptr() != address) WARN("the second tensor got another address");
    check_weight_grad(second);
    CHECK(cpu::conv2d_runs(cpu::Conv2dImpl::onednn) - before == 6);
  }
}

// A forward that oneDNN runs under grad mode keeps its blocked copy of x for the weight gradient
// (backends::onednn_keep_conv_inputs): the gradient reads and drops it, and it stands for x only
// while x is alive and unchanged.
TEST_CASE("conv2d: oneDNN's forward keeps x's blocked copy for the weight gradient while it holds",
          "[may_skip]") {
  for (DType dtype : choice_dtypes()) {
    if (!onednn_runs_here(dtype)) continue;
    INFO(dtype_name(dtype));
    const backends::CpuConvScope scope(backends::CpuConv::onednn);
    const Conv p{{1, 1}, {1, 1}, {1, 1}, 1};
    const Tensor w = random({32, 32, 3, 3}, 181, dtype), g = random({2, 32, 14, 14}, 182, dtype);
    Tensor x = random({2, 32, 14, 14}, 180, dtype);
    const auto forward = [&] { return conv2d(x, w, Tensor(), p.stride, p.padding); };
    const auto check_weight_grad = [&](const Tensor& got) {
      check_close(got, reference_grads(x, w, g, p).w, tolerance(dtype).times(kLongSumFactor));
    };
    REQUIRE(cpu::onednn_kept_conv_inputs() == 0);
    {
      // A training step: the backward's weight gradient takes the copy.
      const Tensor leaf = w.detach().requires_grad_();
      const Tensor y = conv2d(x, leaf, Tensor(), p.stride, p.padding);
      CHECK(cpu::onednn_kept_conv_inputs() == 1);
      y.backward(g);
      CHECK(cpu::onednn_kept_conv_inputs() == 0);
      check_weight_grad(leaf.grad());
    }
    {
      const NoGradGuard inference;
      forward();
      CHECK(cpu::onednn_kept_conv_inputs() == 0);
    }
    backends::set_onednn_keep_conv_inputs(false);
    forward();
    CHECK(cpu::onednn_kept_conv_inputs() == 0);
    backends::set_onednn_keep_conv_inputs(true);
    // x changed in place after the forward: the gradient reads x as it is now, and the stale
    // copy goes.
    forward();
    CHECK(cpu::onednn_kept_conv_inputs() == 1);
    x.mul_(-3.0);
    check_weight_grad(conv2d_backward_weight(g, x, w.shape(), p.stride, p.padding));
    CHECK(cpu::onednn_kept_conv_inputs() == 0);
    // x freed: its copy goes with it.
    forward();
    CHECK(cpu::onednn_kept_conv_inputs() == 1);
    x = Tensor();
    CHECK(cpu::onednn_kept_conv_inputs() == 0);
  }
}

// Under the autotuner, a first training step times the forward without the copy and keeps one
// only where the forward it keeps is oneDNN's; either way the gradients are right and nothing is
// left kept after the backward.
TEST_CASE("conv2d: the autotuner's first step keeps x's copy only for a forward kept on oneDNN",
          "[may_skip]") {
  if (!onednn_runs_here(DType::f32)) return;
  for (cpu::Conv2dImpl winner : {cpu::Conv2dImpl::onednn, cpu::Conv2dImpl::direct}) {
    INFO(cpu::conv2d_impl_name(winner) << " made fastest");
    const RiggedAutotune rigged(winner);
    const Conv p{{1, 1}, {1, 1}, {1, 1}, 1};
    const Tensor x = random({2, 32, 14, 14}, 190, DType::f32);
    const Tensor w = random({32, 32, 3, 3}, 191, DType::f32).requires_grad_();
    const Tensor g = random({2, 32, 14, 14}, 192, DType::f32);
    const Tensor y = conv2d(x, w, Tensor(), p.stride, p.padding);
    CHECK(cpu::onednn_kept_conv_inputs() == (winner == cpu::Conv2dImpl::onednn ? 1 : 0));
    y.backward(g);
    CHECK(cpu::onednn_kept_conv_inputs() == 0);
    check_close(y, reference_conv(x, w.detach(), Tensor(), p), tolerance(DType::f32));
    check_close(w.grad(), reference_grads(x, w.detach(), g, p).w,
                tolerance(DType::f32).times(kLongSumFactor));
  }
}

// The autotuner keeps whichever candidate its clock says is fastest: made to believe each one in
// turn is, it keeps that one wherever it is a candidate, and the results (each call's, the first
// included, which ran every candidate) still match the direct loops.
TEST_CASE("conv2d: the autotuner keeps what its clock says is fastest, and any pick is right",
          "[may_skip]") {
  if (!onednn_runs_here(DType::f32)) return;  // without oneDNN there is one candidate
  for (cpu::Conv2dImpl winner : {cpu::Conv2dImpl::onednn, cpu::Conv2dImpl::direct})
    for (DType dtype : choice_dtypes()) {
      INFO(cpu::conv2d_impl_name(winner) << " made fastest, " << dtype_name(dtype));
      const RiggedAutotune rigged(winner);
      check_cases(dtype, false);
      const std::vector<cpu::Conv2dChoice> choices = cpu::conv2d_choices();
      REQUIRE(!choices.empty());
      for (const cpu::Conv2dChoice& c : choices) {
        const bool candidate =
            std::find(c.candidates.begin(), c.candidates.end(), winner) != c.candidates.end();
        CHECK(c.kept == (candidate ? winner : c.candidates.front()));
      }
    }
}

// Once chosen, a problem runs on the kept implementation alone, and the same clock makes the
// same choices: the autotuner's choice is a function of its timings.
TEST_CASE("conv2d: the autotuner times a problem once and chooses the same again", "[may_skip]") {
  if (!onednn_runs_here(DType::f32)) return;
  const Tensor x = random({2, 32, 9, 9}, 520, DType::f32),
               w = random({32, 32, 3, 3}, 521, DType::f32);
  auto runs = [] {
    return cpu::conv2d_runs(cpu::Conv2dImpl::onednn) + cpu::conv2d_runs(cpu::Conv2dImpl::direct);
  };
  std::vector<cpu::Conv2dImpl> kept;
  for (int trial = 0; trial < 2; ++trial) {
    const RiggedAutotune rigged(cpu::Conv2dImpl::onednn);
    int64_t before = runs();
    conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    CHECK(runs() - before > 2);  // every candidate, several times
    before = runs();
    conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    CHECK(runs() - before == 1);
    REQUIRE(cpu::conv2d_choices().size() == 1);
    kept.push_back(cpu::conv2d_choices()[0].kept);
  }
  CHECK(kept == std::vector<cpu::Conv2dImpl>{cpu::Conv2dImpl::onednn, cpu::Conv2dImpl::onednn});
  // Under a fixed pick nothing is timed.
  const int64_t before = runs();
  conv2d(x, w, Tensor(), {1, 1}, {1, 1});
  CHECK(runs() - before == 1);
  CHECK(cpu::conv2d_choices().empty());
}

// A choice file written by one run is read by the next: the problems it holds are not timed again
// and run on the implementation it names; a malformed line is a ValueError naming the file.
TEST_CASE("conv2d: the autotuner's choice file spares a second run the timing", "[may_skip]") {
  if (!onednn_runs_here(DType::f32)) return;
  const testing::TempDir dir;
  const std::string path = dir.file("choices.txt");
  const Tensor x = random({2, 32, 9, 9}, 530, DType::f32),
               w = random({32, 32, 3, 3}, 531, DType::f32);
  auto runs = [] {
    return cpu::conv2d_runs(cpu::Conv2dImpl::onednn) + cpu::conv2d_runs(cpu::Conv2dImpl::direct);
  };
  {
    const RiggedAutotune rigged(cpu::Conv2dImpl::direct);  // the rule's order puts oneDNN first
    cpu::use_conv2d_choice_file(path);
    conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    REQUIRE(cpu::conv2d_choices().size() == 1);
  }
  const RiggedAutotune second_run(cpu::Conv2dImpl::onednn);
  cpu::use_conv2d_choice_file(path);
  const int64_t before = runs(), direct_before = cpu::conv2d_runs(cpu::Conv2dImpl::direct);
  check_close(conv2d(x, w, Tensor(), {1, 1}, {1, 1}),
              reference_conv(x, w, Tensor(), Conv{{1, 1}, {1, 1}, {1, 1}, 1}),
              tolerance(DType::f32));
  CHECK(runs() - before == 1);
  CHECK(cpu::conv2d_runs(cpu::Conv2dImpl::direct) - direct_before == 1);
  CHECK(cpu::conv2d_choices().empty());
  {
    std::ofstream bad(dir.file("bad.txt"));
    bad << "conv2d 1 2 3 fastest\n";
  }
  CHECK_THROWS_AS(cpu::use_conv2d_choice_file(dir.file("bad.txt")), ValueError);
  CHECK_THROWS_WITH(cpu::use_conv2d_choice_file(dir.file("bad.txt")),
                    Catch::Contains("bad.txt:1: not a conv2d choice"));
}

TEST_CASE("conv2d: an unknown CPU conv2d pick is a ValueError naming the picks") {
  CHECK(backends::parse_cpu_conv("autotune") == backends::CpuConv::autotune);
  CHECK_THROWS_AS(backends::parse_cpu_conv("fastest"), ValueError);
  CHECK_THROWS_WITH(backends::parse_cpu_conv("fastest"),
                    Catch::Contains("rule, autotune, onednn, direct or im2col, got 'fastest'"));
}

TEST_CASE("conv2d: the gradient ops match conv2d's backward in f32") {
  Conv p{{2, 2}, {1, 1}, {1, 1}, 1};
  Tensor x = random({3, 2, 6, 6}, 160, DType::f32), w = random({4, 2, 3, 3}, 161, DType::f32);
  Tensor g = random({3, 4, 3, 3}, 162, DType::f32);
  ReferenceGrads want = reference_grads(x, w, g, p);
  check_close(conv2d_backward_input(g, w, x.shape(), p.stride, p.padding), want.x,
              tolerance(DType::f32));
  check_close(conv2d_backward_weight(g, x, w.shape(), p.stride, p.padding), want.w,
              tolerance(DType::f32));
}

TEST_CASE("conv2d: channel and groups mismatches are a ShapeError") {
  CHECK_THROWS_AS(conv2d(zeros({1, 3, 5, 5}), zeros({4, 2, 3, 3})), ShapeError);
  CHECK_THROWS_WITH(conv2d(zeros({1, 3, 5, 5}), zeros({4, 2, 3, 3})),
                    Catch::Contains("conv2d: input [1, 3, 5, 5] has 3 channels"));
  CHECK_THROWS_AS(
      conv2d(zeros({1, 4, 5, 5}), zeros({3, 2, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2),
      ShapeError);
  CHECK_THROWS_WITH(
      conv2d(zeros({1, 4, 5, 5}), zeros({3, 2, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2),
      Catch::Contains("not divisible by groups = 2"));
}

TEST_CASE("conv2d: a kernel larger than the padded input is a ShapeError") {
  CHECK_THROWS_AS(conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 5, 5})), ShapeError);
  CHECK_THROWS_WITH(
      conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 3, 3}), Tensor(), {1, 1}, {0, 0}, {2, 2}),
      Catch::Contains("larger than the padded input 4x4"));
}

TEST_CASE("conv2d: ranks and shapes of input, weight and bias") {
  CHECK_THROWS_AS(conv2d(zeros({3, 5, 5}), zeros({4, 3, 3, 3})), ShapeError);
  CHECK_THROWS_WITH(conv2d(zeros({3, 5, 5}), zeros({4, 3, 3, 3})),
                    Catch::Contains("conv2d: expected input of shape [N, C, H, W]"));
  CHECK_THROWS_AS(conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3})), ShapeError);
  CHECK_THROWS_AS(conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3, 3}), zeros({3})), ShapeError);
  CHECK_THROWS_WITH(conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3, 3}), zeros({3})),
                    Catch::Contains("bias"));
}

TEST_CASE("conv2d: stride, dilation, padding and groups out of range are a ValueError") {
  Tensor x = zeros({1, 2, 5, 5}), w = zeros({2, 2, 3, 3});
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {0, 1}), ValueError);
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {1, 1}, {-1, 0}), ValueError);
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {1, 1}, {0, 0}, {1, 0}), ValueError);
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {1, 1}, {0, 0}, {1, 1}, 0), ValueError);
  CHECK_THROWS_WITH(conv2d(x, w, Tensor(), {0, 1}), Catch::Contains("conv2d: stride"));
}

TEST_CASE("conv2d: dtypes must match and be floating") {
  CHECK_THROWS_AS(conv2d(zeros({1, 2, 5, 5}), zeros({2, 2, 3, 3}, DType::f64)), DTypeError);
  CHECK_THROWS_WITH(conv2d(zeros({1, 2, 5, 5}), zeros({2, 2, 3, 3}, DType::f64)),
                    Catch::Contains("conv2d"));
  CHECK_THROWS_AS(conv2d(zeros({1, 2, 5, 5}), zeros({2, 2, 3, 3}), zeros({2}, DType::f64)),
                  DTypeError);
  CHECK_THROWS_AS(conv2d(zeros({1, 2, 5, 5}, DType::i64), zeros({2, 2, 3, 3}, DType::i64)),
                  DTypeError);
}

TEST_CASE("conv2d: gradient ops check grad_output's shape") {
  Tensor w = zeros({4, 2, 3, 3});
  CHECK_THROWS_AS(conv2d_backward_input(zeros({1, 4, 2, 2}), w, {1, 2, 5, 5}), ShapeError);
  CHECK_THROWS_WITH(
      conv2d_backward_input(zeros({1, 4, 2, 2}), w, {1, 2, 5, 5}),
      Catch::Contains("conv2d_backward_input: expected grad_output of shape [1, 4, 3, 3]"));
  CHECK_THROWS_AS(conv2d_backward_weight(zeros({1, 4, 3, 3}), zeros({1, 3, 5, 5}), w.shape()),
                  ShapeError);
}

TEST_CASE("conv2d: gradient ops are differentiable, so conv2d has double backward") {
  // Strided, dilated and grouped: the bilinear identities hold for every geometry.
  Tensor g = kiln::testing::random_f64({1, 4, 2, 2}, 1);
  Tensor w = kiln::testing::random_f64({4, 1, 3, 3}, 2);
  Tensor x = kiln::testing::random_f64({1, 2, 6, 5}, 3);
  auto input_grad = [&](const std::vector<Tensor>& in) {
    return conv2d_backward_input(in[0], in[1], x.shape(), 2, 1, 2, 2);
  };
  CHECK_GRADCHECK(input_grad, {g, w});
  auto weight_grad = [&](const std::vector<Tensor>& in) {
    return conv2d_backward_weight(in[0], in[1], w.shape(), 2, 1, 2, 2);
  };
  CHECK_GRADCHECK(weight_grad, {g, x});
  // A gradient penalty's shape: the input gradient of a conv net, differentiated in the weights.
  auto penalty = [&](const std::vector<Tensor>& in) {
    EnableGradGuard enable;  // gradcheck evaluates its differences with recording off
    Tensor xi = x.clone().requires_grad_();
    Tensor y = tanh(conv2d(xi, in[0], Tensor(), 2, 1, 2, 2));
    Tensor gx = autograd::grad({y.sum()}, {xi}, {}, {.create_graph = true})[0];
    return (gx * gx).sum();
  };
  CHECK_GRADCHECK(penalty, {w});
}

// The pure half of the cuDNN graph-API path (kernels/conv2d_graph_plan.h): a GPU run is the only
// check of the cuDNN calls, but what they are given is checked here.
TEST_CASE("conv2d graph plan: NCHW and NHWC strides of input, weight and output") {
  Conv2dGeometry g;
  g.batch = 2, g.in_channels = 6, g.in_h = 5, g.in_w = 7;
  g.out_channels = 4, g.kernel_h = 3, g.kernel_w = 2, g.out_h = 3, g.out_w = 6, g.groups = 2;
  using conv2d_graph::TensorLayout;
  const TensorLayout x = conv2d_graph::input_layout(g, MemoryFormat::contiguous);
  CHECK(x.dims == std::array<int64_t, 4>{2, 6, 5, 7});
  CHECK(x.strides == std::array<int64_t, 4>{210, 35, 7, 1});
  const TensorLayout x_nhwc = conv2d_graph::input_layout(g, MemoryFormat::channels_last);
  CHECK(x_nhwc.dims == x.dims);
  CHECK(x_nhwc.strides == std::array<int64_t, 4>{210, 1, 42, 6});
  // Groups show in the filter's channel count alone.
  const TensorLayout w = conv2d_graph::weight_layout(g, MemoryFormat::contiguous);
  CHECK(w.dims == std::array<int64_t, 4>{4, 3, 3, 2});
  CHECK(w.strides == std::array<int64_t, 4>{18, 6, 2, 1});
  CHECK(conv2d_graph::weight_layout(g, MemoryFormat::channels_last).strides ==
        std::array<int64_t, 4>{18, 1, 6, 3});
  const TensorLayout y = conv2d_graph::output_layout(g, MemoryFormat::channels_last);
  CHECK(y.dims == std::array<int64_t, 4>{2, 4, 3, 6});
  CHECK(y.strides == std::array<int64_t, 4>{72, 1, 24, 4});
  // The strides are those of a tensor kiln lays out the same way.
  const Tensor t = empty({2, 6, 5, 7}, DType::f32, Device::cpu(), MemoryFormat::channels_last);
  CHECK(t.strides() == Shape(x_nhwc.strides.begin(), x_nhwc.strides.end()));
}

TEST_CASE("conv2d graph plan: byte alignment, compute type and the engine filter") {
  CHECK(conv2d_graph::byte_alignment(0x1000) == 16);
  CHECK(conv2d_graph::byte_alignment(0x1008) == 8);
  CHECK(conv2d_graph::byte_alignment(0x1004) == 4);
  CHECK(conv2d_graph::byte_alignment(0x1002) == 2);
  CHECK(conv2d_graph::byte_alignment(0x1001) == 1);
  CHECK(conv2d_graph::compute_dtype(DType::f16) == DType::f32);
  CHECK(conv2d_graph::compute_dtype(DType::bf16) == DType::f32);
  CHECK(conv2d_graph::compute_dtype(DType::f32) == DType::f32);
  CHECK(conv2d_graph::compute_dtype(DType::f64) == DType::f64);
  using conv2d_graph::engine_allowed;
  const conv2d_graph::EngineNotes plain, tensor_core{.tensor_core = true},
      down_convert{.down_convert_inputs = true}, nondeterministic{.nondeterministic = true};
  CHECK(engine_allowed(DType::f32, plain, false, true));
  // TF32 is a tensor-core engine on f32 data: allowed only with TF32 on.
  CHECK_FALSE(engine_allowed(DType::f32, tensor_core, false, false));
  CHECK(engine_allowed(DType::f32, tensor_core, true, false));
  // Half precision and f64 tensor cores lose nothing the dtype had.
  CHECK(engine_allowed(DType::f16, tensor_core, false, false));
  CHECK(engine_allowed(DType::bf16, tensor_core, false, false));
  CHECK(engine_allowed(DType::f64, tensor_core, false, false));
  CHECK_FALSE(engine_allowed(DType::f16, down_convert, true, false));
  CHECK_FALSE(engine_allowed(DType::f32, down_convert, true, false));
  CHECK(engine_allowed(DType::f32, nondeterministic, true, false));
  CHECK_FALSE(engine_allowed(DType::f32, nondeterministic, true, true));
}

TEST_CASE("conv2d graph plan: the cache key tells every input apart") {
  conv2d_graph::PlanKeyInputs base;
  base.geometry.batch = 2, base.geometry.in_channels = 3, base.geometry.in_h = 8;
  base.geometry.in_w = 8, base.geometry.out_channels = 4, base.geometry.kernel_h = 3;
  base.geometry.kernel_w = 3, base.geometry.out_h = 6, base.geometry.out_w = 6;
  base.alignments = {16, 16, 16};
  const std::vector<int64_t> key = conv2d_graph::plan_key(base);
  CHECK(conv2d_graph::plan_key(base) == key);
  std::vector<conv2d_graph::PlanKeyInputs> changed(11, base);
  changed[0].pass = conv2d_graph::Pass::backward_weight;
  changed[1].device = 1;
  changed[2].dtype = DType::bf16;
  changed[3].format = MemoryFormat::channels_last;
  changed[4].geometry.pad_w = 1;
  changed[5].geometry.groups = 3;
  changed[6].alignments[2] = 8;
  changed[7].allow_tf32 = true;
  changed[8].deterministic = true;
  changed[9].benchmark = true;
  changed[10].geometry.dilation_h = 2;
  for (size_t i = 0; i < changed.size(); ++i) {
    INFO("change " << i);
    CHECK(conv2d_graph::plan_key(changed[i]) != key);
  }
}

TEST_CASE("conv2d graph plan: the cuDNN API switch and its names") {
  CHECK(backends::parse_cudnn_api("v7") == backends::CudnnApi::v7);
  CHECK(backends::parse_cudnn_api("v9") == backends::CudnnApi::v9);
  CHECK_THROWS_WITH(backends::parse_cudnn_api("v8"),
                    Catch::Contains("expected a cuDNN API v7 or v9, got 'v8'"));
  CHECK_THROWS_AS(backends::parse_cudnn_api(""), ValueError);
  CHECK(std::string(backends::cudnn_api_name(backends::CudnnApi::v7)) == "v7");
  CHECK(std::string(backends::cudnn_api_name(backends::CudnnApi::v9)) == "v9");
  const backends::CudnnApi before = backends::cudnn_api();
  // v7 until the graph API has run on a GPU (core/backends.h).
  if (std::getenv("KILN_CUDNN_API") == nullptr) CHECK(before == backends::CudnnApi::v7);
  backends::set_cudnn_api(backends::CudnnApi::v7);
  CHECK(backends::cudnn_api() == backends::CudnnApi::v7);
  backends::set_cudnn_api(before);
  // The CPU runs neither API: nothing is counted.
  const backends::CudnnApiCounts counts = backends::cudnn_api_counts();
  conv2d(ones({1, 1, 3, 3}), ones({1, 1, 2, 2}));
  CHECK(backends::cudnn_api_counts().v9_runs == counts.v9_runs);
  CHECK(backends::cudnn_api_counts().v7_runs == counts.v7_runs);
}
