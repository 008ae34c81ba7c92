#include "kiln/data/image/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "kiln/core/error.h"

namespace kiln::data::functional {
namespace {

void check_chw(const char* op, const Tensor& image) {
  KILN_CHECK(image.defined() && image.dim() == 3, ShapeError,
             "{}: expected a CHW image with 3 dims, got shape {}", op,
             image.defined() ? shape_str(image.shape()) : std::string("(undefined)"));
  KILN_CHECK(image.device().is_cpu(), DeviceError, "{}: expected a CPU image, got one on {}", op,
             image.device().str());
}

void check_size(const char* op, const Shape& size_hw) {
  KILN_CHECK(size_hw.size() == 2 && size_hw[0] > 0 && size_hw[1] > 0, ValueError,
             "{}: expected a positive size {{height, width}}, got {}", op, shape_str(size_hw));
}

// Python's round() on a float: halves to even, as nearbyint in the default rounding mode.
int64_t round_half_even(double x) {
  return static_cast<int64_t>(std::nearbyint(x));
}

}  // namespace

Tensor crop(const Tensor& image, int64_t top, int64_t left, int64_t height, int64_t width) {
  check_chw("crop", image);
  KILN_CHECK(height > 0 && width > 0, ValueError, "crop: expected a positive size, got {}x{}",
             height, width);
  const int64_t channels = image.size(0), in_h = image.size(1), in_w = image.size(2);
  const Tensor src = image.detach().contiguous();
  Tensor out = empty({channels, height, width}, image.dtype());
  const size_t element = image.element_size();
  std::memset(out.data_ptr(), 0, static_cast<size_t>(out.numel()) * element);
  const int64_t col_begin = std::max<int64_t>(left, 0);
  const int64_t col_end = std::min(left + width, in_w);
  if (col_begin >= col_end) return out;
  const auto* in = static_cast<const uint8_t*>(src.data_ptr());
  auto* o = static_cast<uint8_t*>(out.data_ptr());
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t r = std::max<int64_t>(top, 0); r < std::min(top + height, in_h); ++r)
      std::memcpy(o + ((c * height + (r - top)) * width + (col_begin - left)) * element,
                  in + ((c * in_h + r) * in_w + col_begin) * element,
                  static_cast<size_t>(col_end - col_begin) * element);
  return out;
}

Tensor center_crop(const Tensor& image, const Shape& size_hw) {
  check_chw("center_crop", image);
  check_size("center_crop", size_hw);
  const int64_t crop_h = size_hw[0], crop_w = size_hw[1];
  // torchvision pads a dimension the crop exceeds by (excess // 2) before, then crops the middle
  // of the padded image: one crop of the original with negative offsets does both.
  const int64_t pad_top = crop_h > image.size(1) ? (crop_h - image.size(1)) / 2 : 0;
  const int64_t pad_left = crop_w > image.size(2) ? (crop_w - image.size(2)) / 2 : 0;
  const int64_t padded_h = std::max(crop_h, image.size(1)),
                padded_w = std::max(crop_w, image.size(2));
  const int64_t top = round_half_even(static_cast<double>(padded_h - crop_h) / 2.0) - pad_top;
  const int64_t left = round_half_even(static_cast<double>(padded_w - crop_w) / 2.0) - pad_left;
  return crop(image, top, left, crop_h, crop_w);
}

Tensor resized_crop(const Tensor& image, int64_t top, int64_t left, int64_t height, int64_t width,
                    const Shape& size_hw) {
  return resize(crop(image, top, left, height, width), size_hw);
}

Tensor hflip(const Tensor& image) {
  check_chw("hflip", image);
  const Tensor src = image.detach().contiguous();
  Tensor out = empty(image.shape(), image.dtype());
  const int64_t width = image.size(2), rows = image.size(0) * image.size(1);
  visit_dtype(image.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(src.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t r = 0; r < rows; ++r)
      std::reverse_copy(in + r * width, in + (r + 1) * width, o + r * width);
  });
  return out;
}

CropBox random_resized_crop_box(int64_t height, int64_t width, std::pair<double, double> scale,
                                std::pair<double, double> ratio, Rng& rng) {
  KILN_CHECK(height > 0 && width > 0, ShapeError,
             "random_resized_crop: expected a non-empty image, got {}x{}", height, width);
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_lo = std::log(ratio.first), log_hi = std::log(ratio.second);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(scale.first, scale.second);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const int64_t w = round_half_even(std::sqrt(target_area * aspect));
    const int64_t h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = rng.randint(0, height - h + 1);
      const int64_t left = rng.randint(0, width - w + 1);
      return {top, left, h, w};
    }
  }
  // The fallback: the whole image, narrowed to the nearest ratio in range.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < std::min(ratio.first, ratio.second)) {
    h = round_half_even(static_cast<double>(w) / std::min(ratio.first, ratio.second));
  } else if (in_ratio > std::max(ratio.first, ratio.second)) {
    w = round_half_even(static_cast<double>(h) * std::max(ratio.first, ratio.second));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

}  // namespace kiln::data::functional
