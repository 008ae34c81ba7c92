// The photo transforms' own logic: sizes, RandomResizedCrop's windows and fallback, ColorJitter's
// ranges, seeding, and their errors. Their pixels are held to torchvision's by
// tests/torchvision/compare_transforms.py.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;
using Catch::Contains;
using data::Rng;
namespace F = data::functional;

namespace {

Tensor ramp(int64_t channels, int64_t height, int64_t width) {
  return arange(channels * height * width, DType::u8).view({channels, height, width});
}

}  // namespace

TEST_CASE("resize keeps the aspect ratio as torchvision computes it") {
  CHECK(F::resized_shape(37, 53, 24) == Shape{24, 34});  // int(24 * 53 / 37) = int(34.38)
  CHECK(F::resized_shape(53, 37, 24) == Shape{34, 24});
  CHECK(F::resized_shape(30, 30, 7) == Shape{7, 7});
  Rng rng(0, 0);
  CHECK(data::resize(16)(ramp(3, 20, 40), rng).shape() == Shape{3, 16, 32});
  CHECK(data::resize(Shape{5, 9})(ramp(1, 20, 40), rng).shape() == Shape{1, 5, 9});
  // A flat image stays flat whatever the scale.
  const Tensor flat = full({3, 13, 7}, 77.0).to(DType::u8);
  CHECK(equal(F::resize(flat, {5, 21}), full({3, 5, 21}, 77.0).to(DType::u8)));
  CHECK_THROWS_WITH(data::resize(8)(ramp(3, 4, 4).to(DType::f32), rng),
                    Contains("resize") && Contains("before to_float"));
  CHECK_THROWS_AS(data::resize(0), ValueError);
}

TEST_CASE("center_crop takes the middle, padding a larger window with zeros") {
  const Tensor image = ramp(1, 4, 5);
  Rng rng(0, 0);
  // (4 - 2) / 2 = 1 row, round((5 - 2) / 2) = round(1.5) = 2 columns (half to even).
  const Tensor middle = data::center_crop(2)(image, rng);
  CHECK(middle.tolist() == std::vector<double>{7, 8, 12, 13});
  // A 6x5 window of a 4x5 image: one row of zeros above and below.
  const Tensor padded = data::center_crop(Shape{6, 5})(image, rng);
  const std::vector<double> values = padded.tolist();
  for (int64_t col = 0; col < 5; ++col) {
    CHECK(values[static_cast<size_t>(col)] == 0);
    CHECK(values[static_cast<size_t>(25 + col)] == 0);
    CHECK(values[static_cast<size_t>(5 + col)] == col);
  }
}

TEST_CASE("random_resized_crop draws windows within scale and ratio, then falls back") {
  const int64_t height = 60, width = 80;
  int fallbacks = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Rng rng(seed, 3);
    const F::CropBox box =
        F::random_resized_crop_box(height, width, {0.08, 1.0}, {3.0 / 4.0, 4.0 / 3.0}, rng);
    INFO("seed " << seed);
    REQUIRE(box.top >= 0);
    REQUIRE(box.left >= 0);
    REQUIRE(box.top + box.height <= height);
    REQUIRE(box.left + box.width <= width);
    const double area = static_cast<double>(box.height * box.width) / (height * width);
    const double ratio = static_cast<double>(box.width) / static_cast<double>(box.height);
    if (box.height == height && box.width == width) ++fallbacks;
    // Rounding each side to whole pixels moves the area and ratio a little.
    CHECK(area >= 0.08 * 0.8);
    CHECK(ratio >= 0.75 * 0.85);
    CHECK(ratio <= 4.0 / 3.0 * 1.15);
  }
  CHECK(fallbacks < 20);  // a 4:3 image rarely needs ten tries

  // A scale above 1 never fits: torchvision's centred fallback, clipped to the ratio range.
  Rng rng(1, 1);
  auto fallback = [&](int64_t h, int64_t w) {
    const F::CropBox b = F::random_resized_crop_box(h, w, {2.0, 2.0}, {3.0 / 4.0, 4.0 / 3.0}, rng);
    return std::vector<int64_t>{b.top, b.left, b.height, b.width};
  };
  CHECK(fallback(30, 90) == std::vector<int64_t>{0, 25, 30, 40});  // too wide: w = round(30 * 4/3)
  CHECK(fallback(90, 30) == std::vector<int64_t>{25, 0, 40, 30});  // too tall: h = round(30 / 0.75)
  CHECK(fallback(40, 45) == std::vector<int64_t>{0, 0, 40, 45});   // in range: the whole image

  // The same Rng state gives the same crop; the output has the requested size.
  const Tensor image = ramp(3, 60, 80);
  const data::Transform crop = data::random_resized_crop(Shape{24, 32});
  Rng a(9, 4), b(9, 4), c(10, 4);
  const Tensor first = crop(image, a);
  CHECK(first.shape() == Shape{3, 24, 32});
  CHECK(equal(first, crop(image, b)));
  CHECK_FALSE(equal(first, crop(image, c)));
  CHECK_THROWS_AS(data::random_resized_crop(8, {0.5, 0.1}), ValueError);
  CHECK_THROWS_AS(data::random_resized_crop(8, {0.1, 1.0}, {0.0, 1.0}), ValueError);
}

TEST_CASE("color_jitter draws factors in its ranges, in a random order, reproducibly") {
  const Tensor image = ramp(3, 8, 8);
  Rng rng(0, 0);
  CHECK(equal(data::color_jitter()(image, rng), image));  // no ranges: nothing to do
  // Brightness alone with the factor pinned is adjust_brightness.
  CHECK(equal(data::color_jitter({0.5, 0.5}, {1, 1}, {1, 1})(image, rng),
              F::adjust_brightness(image, 0.5)));
  const data::Transform jitter = data::color_jitter(0.4, 0.4, 0.4);
  std::set<std::vector<double>> outcomes;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    Rng a(seed, 1), b(seed, 1);
    const Tensor out = jitter(image, a);
    CHECK(equal(out, jitter(image, b)));
    outcomes.insert(out.tolist());
  }
  CHECK(outcomes.size() == 6);
  // Brightness 0.4 means factors in [0.6, 1.4]: a brightness-only jitter of a flat 100 image
  // gives a flat image within [60, 140].
  const Tensor flat = full({3, 4, 4}, 100.0).to(DType::u8);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Rng r(seed, 2);
    const double v = data::color_jitter(0.4)(flat, r).to(DType::f32).max().item();
    CHECK(v >= 59.0);
    CHECK(v <= 140.0);
  }
  CHECK_THROWS_AS(data::color_jitter(-0.1), ValueError);
  CHECK_THROWS_AS(data::color_jitter({1.2, 0.8}, {1, 1}, {1, 1}), ValueError);
  CHECK_THROWS_WITH(F::adjust_contrast(image.to(DType::f32), 1.5), Contains("before to_float"));
  // Saturation leaves a gray image alone.
  const Tensor gray = ramp(1, 6, 6);
  CHECK(equal(F::adjust_saturation(gray, 1.8), gray));
}

TEST_CASE("adjust_hue: Pillow's HSV round trip, torchvision's shift, gray and alpha kept") {
  // Pure red, a green and a gray, against torchvision 0.14's adjust_hue of the same PIL pixels.
  const Tensor image =
      tensor<int64_t>({255, 10, 128, 0, 200, 128, 0, 30, 128}).to(DType::u8).view({3, 1, 3});
  CHECK(F::adjust_hue(image, 0.5).tolist() ==
        std::vector<double>{0, 200, 128, 255, 10, 128, 252, 184, 128});
  CHECK(F::adjust_hue(image, -0.2).tolist() ==
        std::vector<double>{210, 200, 128, 0, 180, 128, 255, 10, 128});
  // No shift is still a round trip through u8 HSV, which moves some colours by a level.
  CHECK(F::adjust_hue(image, 0.0).tolist() ==
        std::vector<double>{255, 10, 128, 0, 200, 128, 0, 28, 128});
  const Tensor gray = ramp(1, 4, 4);
  CHECK(equal(F::adjust_hue(gray, 0.3), gray));
  const Tensor rgba = cat({image, full({1, 1, 3}, 7.0).to(DType::u8)}, 0);
  const Tensor shifted = F::adjust_hue(rgba, 0.5);
  CHECK(equal(shifted.narrow(0, 0, 3), F::adjust_hue(image, 0.5)));
  CHECK(equal(shifted.narrow(0, 3, 1), rgba.narrow(0, 3, 1)));
  CHECK_THROWS_WITH(F::adjust_hue(image, 0.6), Contains("hue_factor must be in [-0.5, 0.5]"));
}

TEST_CASE("color_jitter: the four adjustments in each of the 24 orders, hue within its range") {
  // Hue alone, pinned, is adjust_hue.
  const Tensor image = ramp(3, 6, 6);
  Rng rng(0, 0);
  CHECK(equal(data::color_jitter({1, 1}, {1, 1}, {1, 1}, {0.2, 0.2})(image, rng),
              F::adjust_hue(image, 0.2)));
  // Each adjustment of a fixed order, by hand: functional::color_jitter applies them in turn and
  // skips the ones left out.
  F::ColorJitterParams params;
  params.order = {3, 1, 0, 2};
  params.factors = {0.8, std::nullopt, 1.3, -0.1};
  CHECK(equal(F::color_jitter(image, params),
              F::adjust_saturation(F::adjust_brightness(F::adjust_hue(image, -0.1), 0.8), 1.3)));
  params.order = {0, 1, 2, 4};
  CHECK_THROWS_WITH(F::color_jitter(image, params), Contains("got 4"));

  // Which order a draw took shows in the result: with all four factors pinned, the 24 orders give
  // 24 different images of noise, and 400 draws meet every one of them.
  Generator gen(2);
  const Tensor noise = randint(0, 256, {3, 6, 6}, DType::i64, Device::cpu(), &gen).to(DType::u8);
  const data::Transform jitter = data::color_jitter({0.6, 0.6}, {1.5, 1.5}, {0.3, 0.3}, {0.2, 0.2});
  std::set<std::vector<double>> by_order, drawn;
  std::array<int, 4> order = {0, 1, 2, 3};
  do {
    by_order.insert(F::color_jitter(noise, {order, {0.6, 1.5, 0.3, 0.2}}).tolist());
  } while (std::next_permutation(order.begin(), order.end()));
  REQUIRE(by_order.size() == 24);
  for (uint64_t i = 0; i < 400; ++i) {
    Rng r(i, 3);
    drawn.insert(jitter(noise, r).tolist());
  }
  CHECK(drawn == by_order);

  // hue 0.25 means factors in [-0.25, 0.25]: pure red moves at most 63 levels of hue either way.
  const Tensor red = tensor<int64_t>({255, 0, 0}).to(DType::u8).view({3, 1, 1});
  std::set<std::vector<double>> hues;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    Rng r(seed, 4);
    hues.insert(data::color_jitter(0, 0, 0, 0.25)(red, r).tolist());
  }
  CHECK(hues.size() > 20);
  CHECK(hues.count(F::adjust_hue(red, 0.5).tolist()) == 0);
  CHECK_THROWS_WITH(data::color_jitter(0, 0, 0, 0.6), Contains("hue must be in [0, 0.5]"));
  CHECK_THROWS_AS(data::color_jitter({1, 1}, {1, 1}, {1, 1}, {0.2, -0.2}), ValueError);
  CHECK_THROWS_AS(data::color_jitter({1, 1}, {1, 1}, {1, 1}, {-0.7, 0.1}), ValueError);
}

TEST_CASE("hflip and crop work on any dtype") {
  const Tensor image = arange(0.0, 12.0).view({1, 3, 4});
  CHECK(F::hflip(image).tolist() == std::vector<double>{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8});
  CHECK(F::crop(image, -1, 2, 2, 3).tolist() == std::vector<double>{0, 0, 0, 2, 3, 0});
}
