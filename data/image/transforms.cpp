// The transforms of transforms.h that wrap data/image/ops.h (torchvision's photo transforms).
#include "kiln/data/transforms.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/data/image/ops.h"

namespace kiln::data {
namespace {

Shape square(const char* op, int64_t size) {
  KILN_CHECK(size > 0, ValueError, "{}: expected a positive size, got {}", op, size);
  return {size, size};
}

void check_size(const char* op, const Shape& size_hw) {
  KILN_CHECK(size_hw.size() == 2 && size_hw[0] > 0 && size_hw[1] > 0, ValueError,
             "{}: expected a positive size {{height, width}}, got {}", op, shape_str(size_hw));
}

void check_image(const char* op, const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() == 3, ShapeError,
             "{}: expected a CHW image with 3 dims, got shape {}", op,
             x.defined() ? shape_str(x.shape()) : "(undefined)");
}

// ColorJitter's range of one factor; nullopt when it can only be 1 (torchvision's None).
using FactorRange = std::optional<std::pair<double, double>>;

FactorRange factor_range(const char* name, std::pair<double, double> range) {
  KILN_CHECK(range.first >= 0.0 && range.first <= range.second && std::isfinite(range.second),
             ValueError, "color_jitter: {} must satisfy 0 <= min <= max, got ({}, {})", name,
             range.first, range.second);
  if (range.first == 1.0 && range.second == 1.0) return std::nullopt;
  return range;
}

std::pair<double, double> around_one(const char* name, double value) {
  KILN_CHECK(value >= 0.0 && std::isfinite(value), ValueError,
             "color_jitter: {} must be non-negative, got {}", name, value);
  return {std::max(0.0, 1.0 - value), 1.0 + value};
}

}  // namespace

Transform resize(int64_t size) {
  KILN_CHECK(size > 0, ValueError, "resize: expected a positive size, got {}", size);
  return [size](const Tensor& x, Rng&) {
    profiler::RecordFunction range("resize");
    check_image("resize", x);
    return functional::resize(x, functional::resized_shape(x.size(1), x.size(2), size));
  };
}

Transform resize(Shape size_hw) {
  check_size("resize", size_hw);
  return [size_hw](const Tensor& x, Rng&) {
    profiler::RecordFunction range("resize");
    return functional::resize(x, size_hw);
  };
}

Transform center_crop(int64_t size) {
  return center_crop(square("center_crop", size));
}

Transform center_crop(Shape size_hw) {
  check_size("center_crop", size_hw);
  return [size_hw](const Tensor& x, Rng&) {
    profiler::RecordFunction range("center_crop");
    return functional::center_crop(x, size_hw);
  };
}

Transform random_resized_crop(int64_t size, std::pair<double, double> scale,
                              std::pair<double, double> ratio) {
  return random_resized_crop(square("random_resized_crop", size), scale, ratio);
}

Transform random_resized_crop(Shape size_hw, std::pair<double, double> scale,
                              std::pair<double, double> ratio) {
  check_size("random_resized_crop", size_hw);
  // torchvision only warns about a reversed range; kiln refuses it. A scale above 1 is allowed
  // (it always falls back to the centred window).
  KILN_CHECK(scale.first > 0.0 && scale.first <= scale.second && std::isfinite(scale.second),
             ValueError, "random_resized_crop: scale must satisfy 0 < min <= max, got ({}, {})",
             scale.first, scale.second);
  KILN_CHECK(ratio.first > 0.0 && ratio.first <= ratio.second && std::isfinite(ratio.second),
             ValueError, "random_resized_crop: ratio must satisfy 0 < min <= max, got ({}, {})",
             ratio.first, ratio.second);
  return [=](const Tensor& x, Rng& rng) {
    profiler::RecordFunction range("random_resized_crop");
    check_image("random_resized_crop", x);
    const functional::CropBox box =
        functional::random_resized_crop_box(x.size(1), x.size(2), scale, ratio, rng);
    return functional::resized_crop(x, box.top, box.left, box.height, box.width, size_hw);
  };
}

Transform color_jitter(double brightness, double contrast, double saturation, double hue) {
  KILN_CHECK(hue >= 0.0 && hue <= 0.5, ValueError, "color_jitter: hue must be in [0, 0.5], got {}",
             hue);
  return color_jitter(around_one("brightness", brightness), around_one("contrast", contrast),
                      around_one("saturation", saturation), {-hue, hue});
}

Transform color_jitter(std::pair<double, double> brightness, std::pair<double, double> contrast,
                       std::pair<double, double> saturation, std::pair<double, double> hue) {
  KILN_CHECK(-0.5 <= hue.first && hue.first <= hue.second && hue.second <= 0.5, ValueError,
             "color_jitter: hue must satisfy -0.5 <= min <= max <= 0.5, got ({}, {})", hue.first,
             hue.second);
  const std::array<FactorRange, 4> ranges = {
      factor_range("brightness", brightness), factor_range("contrast", contrast),
      factor_range("saturation", saturation),
      hue.first == 0.0 && hue.second == 0.0 ? std::nullopt : FactorRange(hue)};
  return [ranges](const Tensor& x, Rng& rng) {
    profiler::RecordFunction range("color_jitter");
    // As torchvision's get_params: a random order of the four adjustments, then a factor for each
    // one in use, in the order brightness, contrast, saturation, hue.
    functional::ColorJitterParams params;
    for (int i = 3; i > 0; --i) std::swap(params.order[i], params.order[rng.randint(0, i + 1)]);
    for (size_t k = 0; k < 4; ++k)
      if (ranges[k]) params.factors[k] = rng.uniform(ranges[k]->first, ranges[k]->second);
    return functional::color_jitter(x, params);
  };
}

}  // namespace kiln::data
