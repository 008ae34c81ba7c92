#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "gradcheck.h"
#include "kiln/data/transforms.h"
#include "kiln/kiln.h"

using Catch::Contains;
using kiln::Shape;
using kiln::Tensor;
using kiln::data::Rng;
using kiln::data::Transform;

namespace {

// A u8 image whose element i is (i * 37 + 11) mod 256.
Tensor u8_image(const Shape& shape) {
  std::vector<uint8_t> values(static_cast<size_t>(kiln::shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  return kiln::from_blob(values.data(), shape, kiln::DType::u8);
}

Tensor random_image(const Shape& shape, kiln::DType dtype = kiln::DType::f32, uint64_t seed = 1) {
  kiln::Generator gen(seed);
  return kiln::rand(shape, dtype, kiln::Device::cpu(), &gen);
}

// Element (c, r, col) of a contiguous copy, as double.
struct Image {
  std::vector<double> values;
  int64_t height, width;
  explicit Image(const Tensor& t) : values(t.tolist()), height(t.size(1)), width(t.size(2)) {}
  double at(int64_t c, int64_t r, int64_t col) const {
    return values[static_cast<size_t>((c * height + r) * width + col)];
  }
};

}  // namespace

TEST_CASE("transforms: Rng is a deterministic Philox stream") {
  Rng a(7, 3), b(7, 3), other_stream(7, 4), other_seed(8, 3);
  std::vector<uint32_t> wa, wb, ws, wd;
  for (int i = 0; i < 16; ++i) {
    wa.push_back(a.next_u32());
    wb.push_back(b.next_u32());
    ws.push_back(other_stream.next_u32());
    wd.push_back(other_seed.next_u32());
  }
  CHECK(wa == wb);
  CHECK(wa != ws);
  CHECK(wa != wd);
  for (uint64_t k = 0; k < 16; ++k) CHECK(wa[k] == kiln::philox_word(7, 3, k));
}

TEST_CASE("transforms: Rng uniform and randint stay in range and cover it") {
  Rng rng(1, 0);
  double lo = 1.0, hi = 0.0;
  std::set<int64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const double u = rng.uniform();
    CHECK(u >= 0.0);
    CHECK(u < 1.0);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    const double v = rng.uniform(-2.0, 3.0);
    CHECK(v >= -2.0);
    CHECK(v < 3.0);
    const int64_t k = rng.randint(-3, 4);
    CHECK(k >= -3);
    CHECK(k < 4);
    seen.insert(k);
  }
  CHECK(lo < 0.01);
  CHECK(hi > 0.99);
  CHECK(seen.size() == 7);
  CHECK(rng.randint(5, 6) == 5);
  CHECK_THROWS_AS(rng.randint(5, 5), kiln::ValueError);
  CHECK_THROWS_WITH(rng.randint(5, 4), Contains("randint"));
}

TEST_CASE("transforms: to_float scales u8 by 1/255") {
  Rng rng(0, 0);
  const Tensor x = u8_image({2, 3, 4});
  const Tensor y = kiln::data::to_float()(x, rng);
  CHECK(y.dtype() == kiln::DType::f32);
  CHECK(y.shape() == Shape{2, 3, 4});
  const std::vector<double> in = x.tolist(), out = y.tolist();
  for (size_t i = 0; i < in.size(); ++i)
    CHECK(out[i] == static_cast<double>(static_cast<float>(in[i]) / 255.0f));
  const Tensor edges = kiln::data::to_float()(kiln::tensor<uint8_t>({0, 255}, {1, 1, 2}), rng);
  CHECK(edges.tolist() == std::vector<double>{0.0, 1.0});
}

TEST_CASE("transforms: to_float on a non-contiguous image") {
  Rng rng(0, 0);
  const Tensor x = u8_image({3, 4, 5}).permute({0, 2, 1});
  REQUIRE(!x.is_contiguous());
  const std::vector<double> in = x.tolist(), out = kiln::data::to_float()(x, rng).tolist();
  for (size_t i = 0; i < in.size(); ++i)
    CHECK(out[i] == static_cast<double>(static_cast<float>(in[i]) / 255.0f));
}

TEST_CASE("transforms: to_float rejects wrong dtypes and shapes") {
  Rng rng(0, 0);
  CHECK_THROWS_AS(kiln::data::to_float()(random_image({1, 2, 2}), rng), kiln::DTypeError);
  CHECK_THROWS_WITH(kiln::data::to_float()(random_image({1, 2, 2}), rng),
                    Contains("to_float") && Contains("f32"));
  CHECK_THROWS_AS(kiln::data::to_float()(u8_image({4, 4}), rng), kiln::ShapeError);
  CHECK_THROWS_WITH(kiln::data::to_float()(u8_image({2, 1, 4, 4}), rng),
                    Contains("to_float") && Contains("[2, 1, 4, 4]"));
}

TEST_CASE("transforms: normalize per channel, f32 and f64") {
  Rng rng(0, 0);
  const std::vector<double> mean = {0.1, 0.5, -0.2}, std = {0.3, 2.0, 0.25};
  for (kiln::DType dtype : {kiln::DType::f32, kiln::DType::f64}) {
    const Tensor x = random_image({3, 4, 5}, dtype);
    const Tensor y = kiln::data::normalize(mean, std)(x, rng);
    CHECK(y.dtype() == dtype);
    const Image in(x), out(y);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t col = 0; col < 5; ++col) {
          const double expected = dtype == kiln::DType::f32
                                      ? static_cast<double>((static_cast<float>(in.at(c, r, col)) -
                                                             static_cast<float>(mean[c])) /
                                                            static_cast<float>(std[c]))
                                      : (in.at(c, r, col) - mean[c]) / std[c];
          CHECK(out.at(c, r, col) == expected);
        }
  }
}

TEST_CASE("transforms: normalize with one value for every channel, non-contiguous input") {
  Rng rng(0, 0);
  const Tensor x = random_image({2, 3, 4}, kiln::DType::f64).transpose(1, 2);
  const Tensor y = kiln::data::normalize({0.5}, {0.25})(x, rng);
  const std::vector<double> in = x.tolist(), out = y.tolist();
  for (size_t i = 0; i < in.size(); ++i) CHECK(out[i] == (in[i] - 0.5) / 0.25);
}

TEST_CASE("transforms: normalize errors") {
  Rng rng(0, 0);
  CHECK_THROWS_AS(kiln::data::normalize({0.1, 0.2}, {1.0}), kiln::ValueError);
  CHECK_THROWS_AS(kiln::data::normalize({}, {}), kiln::ValueError);
  CHECK_THROWS_AS(kiln::data::normalize({0.1}, {0.0}), kiln::ValueError);
  CHECK_THROWS_WITH(kiln::data::normalize({0.1, 0.2}, {1.0, 0.0}),
                    Contains("normalize") && Contains("channel 1"));
  const Transform n3 = kiln::data::normalize({0.1, 0.2, 0.3}, {1.0, 1.0, 1.0});
  CHECK_THROWS_AS(n3(random_image({2, 4, 4}), rng), kiln::ShapeError);
  CHECK_THROWS_WITH(n3(random_image({2, 4, 4}), rng),
                    Contains("normalize") && Contains("[2, 4, 4]"));
  CHECK_THROWS_AS(n3(u8_image({3, 4, 4}), rng), kiln::DTypeError);
}

TEST_CASE("transforms: random_crop matches a zero-padded window at the drawn offset") {
  const Tensor x = u8_image({2, 6, 7});
  const Image in(x);
  const int64_t padding = 2, crop_h = 5, crop_w = 4;
  const Transform crop = kiln::data::random_crop(Shape{crop_h, crop_w}, padding);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Rng rng(seed, 0), replay(seed, 0);
    const Tensor y = crop(x, rng);
    const int64_t top = replay.randint(0, 6 + 2 * padding - crop_h + 1);
    const int64_t left = replay.randint(0, 7 + 2 * padding - crop_w + 1);
    REQUIRE(y.shape() == Shape{2, crop_h, crop_w});
    CHECK(y.dtype() == kiln::DType::u8);
    const Image out(y);
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t r = 0; r < crop_h; ++r)
        for (int64_t col = 0; col < crop_w; ++col) {
          const int64_t sr = top + r - padding, sc = left + col - padding;
          const bool inside = sr >= 0 && sr < 6 && sc >= 0 && sc < 7;
          CHECK(out.at(c, r, col) == (inside ? in.at(c, sr, sc) : 0.0));
        }
  }
}

TEST_CASE("transforms: random_crop reaches every offset") {
  const Transform crop = kiln::data::random_crop(4, 2);  // 4x4 image padded to 8x8: offsets 0..4
  const Tensor x = kiln::ones({1, 4, 4}, kiln::DType::f32);
  std::set<double> sums;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    Rng rng(seed, 0);
    sums.insert(crop(x, rng).sum().item<double>());
  }
  // The window overlaps the 4x4 ones by (4 - |dy|) * (4 - |dx|) for dy, dx in -2..2.
  CHECK(sums == std::set<double>{4, 6, 8, 9, 12, 16});
}

TEST_CASE("transforms: random_crop without padding, f64 and non-contiguous") {
  const Tensor x = random_image({3, 5, 6}, kiln::DType::f64).transpose(1, 2);  // [3, 6, 5]
  Rng rng(5, 1), replay(5, 1);
  const Tensor y = kiln::data::random_crop(3)(x, rng);
  const int64_t top = replay.randint(0, 4), left = replay.randint(0, 3);
  CHECK(y.tolist() == x.slice(1, top, top + 3).slice(2, left, left + 3).tolist());
  // A crop the size of the image draws nothing and returns the image unchanged.
  Rng used(5, 1);
  CHECK(kiln::data::random_crop(Shape{6, 5})(x, used).tolist() == x.tolist());
  CHECK(used.next_u32() == Rng(5, 1).next_u32());
}

TEST_CASE("transforms: random_crop errors") {
  Rng rng(0, 0);
  CHECK_THROWS_AS(kiln::data::random_crop(0), kiln::ValueError);
  CHECK_THROWS_AS(kiln::data::random_crop(Shape{4}), kiln::ValueError);
  CHECK_THROWS_AS(kiln::data::random_crop(4, -1), kiln::ValueError);
  CHECK_THROWS_WITH(kiln::data::random_crop(4, -1), Contains("random_crop") && Contains("-1"));
  CHECK_THROWS_AS(kiln::data::random_crop(9, 2)(u8_image({1, 4, 4}), rng), kiln::ShapeError);
  CHECK_THROWS_WITH(kiln::data::random_crop(9, 2)(u8_image({1, 4, 4}), rng),
                    Contains("random_crop") && Contains("[1, 4, 4]"));
  CHECK_THROWS_AS(kiln::data::random_crop(2)(u8_image({4, 4}), rng), kiln::ShapeError);
}

TEST_CASE("transforms: random_horizontal_flip mirrors the width axis with probability p") {
  const Tensor x = u8_image({2, 3, 4}).to(kiln::DType::i64);
  const Image in(x);
  Rng rng(0, 0);
  const Image flipped(kiln::data::random_horizontal_flip(1.0)(x, rng));
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t col = 0; col < 4; ++col) CHECK(flipped.at(c, r, col) == in.at(c, r, 3 - col));
  CHECK(kiln::data::random_horizontal_flip(0.0)(x, rng).tolist() == x.tolist());

  int flips = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Rng a(seed, 9), replay(seed, 9);
    const bool expect_flip = replay.uniform() < 0.5;
    const Tensor y = kiln::data::random_horizontal_flip()(x, a);
    CHECK((y.tolist() == flipped.values) == expect_flip);
    flips += expect_flip ? 1 : 0;
  }
  CHECK(flips > 60);
  CHECK(flips < 140);
}

TEST_CASE("transforms: random_horizontal_flip on a non-contiguous f32 image, and errors") {
  const Tensor x = random_image({2, 5, 3}).transpose(1, 2);  // [2, 3, 5]
  Rng rng(0, 0);
  const Image in(x), out(kiln::data::random_horizontal_flip(1.0)(x, rng));
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t col = 0; col < 5; ++col) CHECK(out.at(c, r, col) == in.at(c, r, 4 - col));
  CHECK_THROWS_AS(kiln::data::random_horizontal_flip(1.5), kiln::ValueError);
  CHECK_THROWS_WITH(kiln::data::random_horizontal_flip(-0.1),
                    Contains("random_horizontal_flip") && Contains("-0.1"));
  CHECK_THROWS_AS(kiln::data::random_horizontal_flip()(random_image({3, 3}), rng),
                  kiln::ShapeError);
}

namespace {

struct Rect {
  int64_t top = 0, left = 0, h = 0, w = 0;
  bool erased = false;
};

// torchvision's RandomErasing.get_params, drawing from the same Rng sequence.
Rect erasing_reference(Rng& rng, double p, int64_t height, int64_t width, double smin, double smax,
                       double rmin, double rmax) {
  Rect rect;
  if (!(rng.uniform() < p)) return rect;
  const double area = static_cast<double>(height * width);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * rng.uniform(smin, smax);
    const double aspect = std::exp(rng.uniform(std::log(rmin), std::log(rmax)));
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(erase_area * aspect)));
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(erase_area / aspect)));
    if (!(h < height && w < width)) continue;
    rect.top = rng.randint(0, height - h + 1);
    rect.left = rng.randint(0, width - w + 1);
    rect.h = h;
    rect.w = w;
    rect.erased = true;
    return rect;
  }
  return rect;
}

}  // namespace

TEST_CASE("transforms: random_erasing fills one rectangle, as torchvision draws it") {
  const Tensor x = random_image({3, 16, 12}) + 1.0;  // no zeros of its own
  const Image in(x);
  const Transform erase = kiln::data::random_erasing(0.7, {0.02, 0.33}, {0.3, 3.3}, -1.5);
  int erased_count = 0;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Rng rng(seed, 2), replay(seed, 2);
    const Rect rect = erasing_reference(replay, 0.7, 16, 12, 0.02, 0.33, 0.3, 3.3);
    const Tensor y = erase(x, rng);
    CHECK(y.shape() == x.shape());
    const Image out(y);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t r = 0; r < 16; ++r)
        for (int64_t col = 0; col < 12; ++col) {
          const bool inside = rect.erased && r >= rect.top && r < rect.top + rect.h &&
                              col >= rect.left && col < rect.left + rect.w;
          CHECK(out.at(c, r, col) == (inside ? -1.5 : in.at(c, r, col)));
        }
    if (rect.erased) {
      ++erased_count;
      // The area fraction lies in the scale range, up to rounding of h and w.
      const double fraction = static_cast<double>(rect.h * rect.w) / (16.0 * 12.0);
      CHECK(fraction > 0.0);
      CHECK(fraction < 0.5);
    }
  }
  CHECK(erased_count > 20);
  CHECK(x.tolist() == in.values);  // the input is never modified
}

TEST_CASE("transforms: random_erasing on u8 with p = 1 and p = 0") {
  const Tensor x = kiln::full({1, 10, 10}, 200, kiln::DType::u8);
  Rng rng(3, 0);
  const Tensor y = kiln::data::random_erasing(1.0)(x, rng);
  const std::vector<double> v = y.tolist();
  const auto zeros = std::count(v.begin(), v.end(), 0.0);
  CHECK(zeros >= 1);
  CHECK(zeros <= 40);
  CHECK(kiln::data::random_erasing(0.0)(x, rng).tolist() == x.tolist());
}

TEST_CASE("transforms: random_erasing errors") {
  Rng rng(0, 0);
  CHECK_THROWS_AS(kiln::data::random_erasing(2.0), kiln::ValueError);
  CHECK_THROWS_AS(kiln::data::random_erasing(0.5, {0.5, 0.1}), kiln::ValueError);
  CHECK_THROWS_AS(kiln::data::random_erasing(0.5, {-0.1, 0.2}), kiln::ValueError);
  CHECK_THROWS_AS(kiln::data::random_erasing(0.5, {0.1, 1.2}), kiln::ValueError);
  CHECK_THROWS_AS(kiln::data::random_erasing(0.5, {0.1, 0.2}, {0.0, 3.0}), kiln::ValueError);
  CHECK_THROWS_WITH(kiln::data::random_erasing(0.5, {0.1, 0.2}, {3.0, 0.3}),
                    Contains("random_erasing") && Contains("ratio"));
  CHECK_THROWS_AS(kiln::data::random_erasing(1.0)(random_image({8}), rng), kiln::ShapeError);
}

TEST_CASE("transforms: compose applies in order and is deterministic for a seed") {
  const Transform pipeline = kiln::data::compose(
      {kiln::data::to_float(), kiln::data::normalize({0.5}, {0.5}), kiln::data::random_crop(8, 2),
       kiln::data::random_horizontal_flip(), kiln::data::random_erasing()});
  const Tensor x = u8_image({1, 8, 8});
  Rng a(11, 4), b(11, 4);
  const Tensor ya = pipeline(x, a), yb = pipeline(x, b);
  CHECK(ya.dtype() == kiln::DType::f32);
  CHECK(ya.shape() == Shape{1, 8, 8});
  CHECK(ya.tolist() == yb.tolist());
  std::set<std::vector<double>> distinct;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    Rng rng(seed, 4);
    distinct.insert(pipeline(x, rng).tolist());
  }
  CHECK(distinct.size() > 5);

  // Deterministic steps alone equal their composition by hand.
  Rng r1(0, 0), r2(0, 0);
  const Tensor by_hand = kiln::data::normalize({0.5}, {0.5})(kiln::data::to_float()(x, r1), r1);
  const Tensor composed =
      kiln::data::compose({kiln::data::to_float(), kiln::data::normalize({0.5}, {0.5})})(x, r2);
  CHECK(composed.tolist() == by_hand.tolist());
  CHECK(kiln::data::compose({})(x, r2).is_same(x));
}

TEST_CASE("transforms: compose rejects an empty transform") {
  CHECK_THROWS_AS(kiln::data::compose({kiln::data::to_float(), Transform()}), kiln::ValueError);
  CHECK_THROWS_WITH(kiln::data::compose({kiln::data::to_float(), Transform()}),
                    Contains("compose") && Contains("transform 1"));
}
