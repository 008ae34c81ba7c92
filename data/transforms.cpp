#include "kiln/data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/data/image/ops.h"

namespace kiln::data {

double Rng::uniform() {
  const uint32_t hi = next_u32();
  const uint32_t lo = next_u32();
  return uint32x2_to_uniform_double(hi, lo);
}

double Rng::uniform(double low, double high) {
  return low + (high - low) * uniform();
}

int64_t Rng::randint(int64_t low, int64_t high) {
  KILN_CHECK(low < high, ValueError, "Rng::randint: expected low < high, got [{}, {})", low, high);
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  // Rejecting the lowest 2^64 mod range values leaves a whole number of copies of [0, range).
  const uint64_t reject_below = (0 - range) % range;
  uint64_t x;
  do {
    const uint64_t hi = next_u32();
    x = (hi << 32) | next_u32();
  } while (x < reject_below);
  return static_cast<int64_t>(static_cast<uint64_t>(low) + x % range);
}

namespace {

void check_image(const char* op, const Tensor& x) {
  KILN_CHECK(x.defined(), ValueError, "{}: got an undefined tensor", op);
  KILN_CHECK(x.dim() == 3, ShapeError, "{}: expected a CHW image with 3 dims, got shape {}", op,
             shape_str(x.shape()));
  KILN_CHECK(x.device().is_cpu(), DeviceError, "{}: expected a CPU image, got one on {}", op,
             x.device().str());
}

void check_probability(const char* op, double p) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, ValueError, "{}: p must be in [0, 1], got {}", op, p);
}

// A contiguous copy that the caller may write to.
Tensor fresh_copy(const Tensor& x) {
  Tensor src = x.detach().contiguous();
  Tensor out = empty(x.shape(), x.dtype());
  std::memcpy(out.data_ptr(), src.data_ptr(), static_cast<size_t>(x.numel()) * x.element_size());
  return out;
}

}  // namespace

Transform to_float() {
  return [](const Tensor& x, Rng&) {
    profiler::RecordFunction range("to_float");
    check_image("to_float", x);
    KILN_CHECK(x.dtype() == DType::u8, DTypeError, "to_float: expected a u8 image, got {}",
               dtype_name(x.dtype()));
    Tensor src = x.detach().contiguous();
    Tensor out = empty(x.shape(), DType::f32);
    const uint8_t* in = src.data<uint8_t>();
    float* o = out.data<float>();
    // Division, not multiplication by 1/255, so that results match torchvision bit for bit.
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = static_cast<float>(in[i]) / 255.0f;
    return out;
  };
}

Transform normalize(std::vector<double> mean, std::vector<double> std) {
  KILN_CHECK(!mean.empty() && mean.size() == std.size(), ValueError,
             "normalize: expected mean and std of the same non-zero length, got {} and {}",
             mean.size(), std.size());
  for (size_t c = 0; c < std.size(); ++c)
    KILN_CHECK(std[c] != 0.0 && std::isfinite(std[c]) && std::isfinite(mean[c]), ValueError,
               "normalize: channel {} has mean {} and std {}; std must be finite and non-zero", c,
               mean[c], std[c]);
  return [mean = std::move(mean), std = std::move(std)](const Tensor& x, Rng&) {
    profiler::RecordFunction range("normalize");
    check_image("normalize", x);
    const int64_t channels = x.size(0);
    KILN_CHECK(mean.size() == 1 || static_cast<int64_t>(mean.size()) == channels, ShapeError,
               "normalize: {} means for an image of shape {} ({} channels)", mean.size(),
               shape_str(x.shape()), channels);
    Tensor src = x.detach().contiguous();
    Tensor out = empty(x.shape(), x.dtype());
    const int64_t plane = channels == 0 ? 0 : x.numel() / channels;
    visit_f32_f64("normalize", x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = src.data<T>();
      T* o = out.data<T>();
      for (int64_t c = 0; c < channels; ++c) {
        const size_t k = mean.size() == 1 ? 0 : static_cast<size_t>(c);
        const T m = static_cast<T>(mean[k]);
        const T s = static_cast<T>(std[k]);
        for (int64_t i = c * plane; i < (c + 1) * plane; ++i) o[i] = (in[i] - m) / s;
      }
    });
    return out;
  };
}

Transform random_crop(int64_t size, int64_t padding) {
  return random_crop(Shape{size, size}, padding);
}

Transform random_crop(Shape size_hw, int64_t padding) {
  KILN_CHECK(size_hw.size() == 2 && size_hw[0] > 0 && size_hw[1] > 0, ValueError,
             "random_crop: expected a positive size {{height, width}}, got {}", shape_str(size_hw));
  KILN_CHECK(padding >= 0, ValueError, "random_crop: padding must be non-negative, got {}",
             padding);
  const int64_t crop_h = size_hw[0], crop_w = size_hw[1];
  return [crop_h, crop_w, padding](const Tensor& x, Rng& rng) {
    profiler::RecordFunction range("random_crop");
    check_image("random_crop", x);
    const int64_t channels = x.size(0), height = x.size(1), width = x.size(2);
    const int64_t padded_h = height + 2 * padding, padded_w = width + 2 * padding;
    KILN_CHECK(crop_h <= padded_h && crop_w <= padded_w, ShapeError,
               "random_crop: a {}x{} crop does not fit an image of shape {} padded by {}", crop_h,
               crop_w, shape_str(x.shape()), padding);
    int64_t top = 0, left = 0;
    // As torchvision, a crop the size of the padded image draws nothing.
    if (crop_h != padded_h || crop_w != padded_w) {
      top = rng.randint(0, padded_h - crop_h + 1);
      left = rng.randint(0, padded_w - crop_w + 1);
    }
    Tensor src = x.detach().contiguous();
    Tensor out = empty({channels, crop_h, crop_w}, x.dtype());
    const size_t element = x.element_size();
    std::memset(out.data_ptr(), 0, static_cast<size_t>(out.numel()) * element);
    // Window rows/cols in the unpadded image's coordinates, clipped to it.
    const int64_t row0 = top - padding, col0 = left - padding;
    const int64_t col_begin = std::max<int64_t>(col0, 0);
    const int64_t col_end = std::min(col0 + crop_w, width);
    if (col_begin >= col_end) return out;
    const auto* in = static_cast<const uint8_t*>(src.data_ptr());
    auto* o = static_cast<uint8_t*>(out.data_ptr());
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t r = std::max<int64_t>(row0, 0); r < std::min(row0 + crop_h, height); ++r) {
        const int64_t out_index = (c * crop_h + (r - row0)) * crop_w + (col_begin - col0);
        const int64_t in_index = (c * height + r) * width + col_begin;
        std::memcpy(o + out_index * element, in + in_index * element,
                    static_cast<size_t>(col_end - col_begin) * element);
      }
    }
    return out;
  };
}

Transform random_horizontal_flip(double p) {
  check_probability("random_horizontal_flip", p);
  return [p](const Tensor& x, Rng& rng) {
    profiler::RecordFunction range("random_horizontal_flip");
    check_image("random_horizontal_flip", x);
    if (!(rng.uniform() < p)) return x;
    return functional::hflip(x);
  };
}

Transform random_erasing(double p, std::pair<double, double> scale, std::pair<double, double> ratio,
                         double value) {
  check_probability("random_erasing", p);
  KILN_CHECK(scale.first >= 0.0 && scale.first <= scale.second && scale.second <= 1.0, ValueError,
             "random_erasing: scale must satisfy 0 <= min <= max <= 1, got ({}, {})", scale.first,
             scale.second);
  KILN_CHECK(ratio.first > 0.0 && ratio.first <= ratio.second && std::isfinite(ratio.second),
             ValueError, "random_erasing: ratio must satisfy 0 < min <= max, got ({}, {})",
             ratio.first, ratio.second);
  const double log_ratio_min = std::log(ratio.first), log_ratio_max = std::log(ratio.second);
  return [=](const Tensor& x, Rng& rng) {
    profiler::RecordFunction range("random_erasing");
    check_image("random_erasing", x);
    if (!(rng.uniform() < p)) return x;
    const int64_t height = x.size(1), width = x.size(2);
    const double area = static_cast<double>(height * width);
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double erase_area = area * rng.uniform(scale.first, scale.second);
      const double aspect = std::exp(rng.uniform(log_ratio_min, log_ratio_max));
      // Python's round() rounds halves to even, as nearbyint does in the default rounding mode.
      const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(erase_area * aspect)));
      const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(erase_area / aspect)));
      if (!(h < height && w < width)) continue;
      const int64_t top = rng.randint(0, height - h + 1);
      const int64_t left = rng.randint(0, width - w + 1);
      Tensor out = fresh_copy(x);
      visit_dtype(x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* o = static_cast<T*>(out.data_ptr());
        const T fill = convert<T>(value);
        for (int64_t c = 0; c < x.size(0); ++c)
          for (int64_t r = top; r < top + h; ++r)
            std::fill_n(o + (c * height + r) * width + left, w, fill);
      });
      return out;
    }
    return x;
  };
}

Transform compose(std::vector<Transform> transforms) {
  for (size_t i = 0; i < transforms.size(); ++i)
    KILN_CHECK(static_cast<bool>(transforms[i]), ValueError, "compose: transform {} of {} is empty",
               i, transforms.size());
  return [transforms = std::move(transforms)](const Tensor& x, Rng& rng) {
    Tensor out = x;
    for (const Transform& t : transforms) out = t(out, rng);
    return out;
  };
}

}  // namespace kiln::data
