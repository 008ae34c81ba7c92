// Pillow's ImageEnhance on u8 images: enhance(factor) is Image.blend(degenerate, image, factor),
// computed as libImaging/Blend.c does, in single precision (Pillow passes the factor as a C float)
// and truncated to u8; outside [0, 1] the blend is clipped to [0, 255] first. The hue goes through
// Pillow's HSV conversions (libImaging/Convert.c), with their mix of float and double arithmetic
// (checked against Pillow 9.4 on all 2^24 colours, for six hue shifts).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/data/image/ops.h"

namespace kiln::data::functional {
namespace {

void check_u8_image(const char* op, const Tensor& image) {
  KILN_CHECK(image.defined() && image.dim() == 3, ShapeError,
             "{}: expected a CHW image with 3 dims, got shape {}", op,
             image.defined() ? shape_str(image.shape()) : std::string("(undefined)"));
  KILN_CHECK(image.dtype() == DType::u8, DTypeError,
             "{}: expected a u8 image (adjust colours before to_float, as torchvision adjusts "
             "PIL images before ToTensor), got {}",
             op, dtype_name(image.dtype()));
  KILN_CHECK(image.size(0) == 1 || image.size(0) == 3 || image.size(0) == 4, ShapeError,
             "{}: expected 1, 3 or 4 channels, got shape {}", op, shape_str(image.shape()));
  KILN_CHECK(image.size(1) > 0 && image.size(2) > 0, ShapeError,
             "{}: expected a non-empty image, got shape {}", op, shape_str(image.shape()));
}

void check_factor(const char* op, double factor) {
  KILN_CHECK(factor >= 0.0, ValueError, "{}: the factor must be non-negative, got {}", op, factor);
}

// Blend.c: in1 + alpha * (in2 - in1) in float, two roundings; truncated, or clipped then
// truncated. Each step is exact in double and then rounded to float by the cast, which keeps the
// compiler from fusing the two into one FMA (one rounding: off by one level on some pixels).
uint8_t blend(uint8_t degenerate, uint8_t pixel, float alpha, bool extrapolate) {
  const auto product =
      static_cast<float>(static_cast<double>(alpha) * (int{pixel} - int{degenerate}));
  const auto value = static_cast<float>(static_cast<double>(product) + degenerate);
  if (!extrapolate) return static_cast<uint8_t>(value);
  if (value <= 0.0f) return 0;
  if (value >= 255.0f) return 255;
  return static_cast<uint8_t>(value);
}

// PIL's L conversion of pixel i of a CHW image (its first channel when gray).
uint8_t luma_at(const uint8_t* in, int64_t plane, int64_t channels, int64_t i) {
  if (channels == 1) return in[i];
  const unsigned r = in[i], g = in[plane + i], b = in[2 * plane + i];
  return static_cast<uint8_t>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

// Blends the colour channels of `image` with degenerate(c, i); alpha (channel 3) is kept.
template <typename Degenerate>
Tensor blend_image(const Tensor& image, double factor, Degenerate degenerate) {
  const Tensor src = image.detach().contiguous();
  if (factor == 1.0) return src.clone();
  Tensor out = src.clone();
  const int64_t channels = image.size(0), plane = image.size(1) * image.size(2);
  const int64_t colour = channels == 4 ? 3 : channels;
  const uint8_t* in = src.data<uint8_t>();
  uint8_t* o = out.data<uint8_t>();
  const auto alpha = static_cast<float>(factor);
  const bool extrapolate = !(alpha >= 0.0f && alpha <= 1.0f);
  for (int64_t c = 0; c < colour; ++c)
    for (int64_t i = 0; i < plane; ++i)
      o[c * plane + i] = blend(degenerate(c, i), in[c * plane + i], alpha, extrapolate);
  return out;
}

uint8_t clip8(int value) {
  return static_cast<uint8_t>(value <= 0 ? 0 : value < 256 ? value : 255);
}

// Convert.c's rgb2hsv_row, "following colorsys.py".
void rgb_to_hsv(const uint8_t rgb[3], uint8_t hsv[3]) {
  const uint8_t r = rgb[0], g = rgb[1], b = rgb[2];
  const uint8_t maxc = std::max({r, g, b}), minc = std::min({r, g, b});
  hsv[2] = maxc;
  if (minc == maxc) {
    hsv[0] = hsv[1] = 0;
    return;
  }
  const auto range = static_cast<float>(maxc - minc);
  const float s = range / static_cast<float>(maxc);
  const float rc = static_cast<float>(maxc - r) / range;
  const float gc = static_cast<float>(maxc - g) / range;
  const float bc = static_cast<float>(maxc - b) / range;
  float h = 0;
  if (r == maxc)
    h = bc - gc;
  else if (g == maxc)
    h = static_cast<float>(2.0 + rc - bc);
  else
    h = static_cast<float>(4.0 + gc - rc);
  h = static_cast<float>(std::fmod(h / 6.0 + 1.0, 1.0));
  hsv[0] = clip8(static_cast<int>(h * 255.0));
  hsv[1] = clip8(static_cast<int>(s * 255.0));
}

// Convert.c's hsv2rgb.
void hsv_to_rgb(const uint8_t hsv[3], uint8_t rgb[3]) {
  const uint8_t h = hsv[0], s = hsv[1], v = hsv[2];
  if (s == 0) {
    rgb[0] = rgb[1] = rgb[2] = v;
    return;
  }
  const int i = static_cast<int>(std::floor(static_cast<float>(h) * 6.0 / 255.0));
  const auto f = static_cast<float>(static_cast<float>(h) * 6.0 / 255.0 - static_cast<float>(i));
  const auto fs = static_cast<float>(static_cast<float>(s) / 255.0);
  const uint8_t p = clip8(static_cast<int>(std::round(static_cast<float>(v) * (1.0 - fs))));
  const uint8_t q = clip8(static_cast<int>(std::round(static_cast<float>(v) * (1.0 - fs * f))));
  const uint8_t t =
      clip8(static_cast<int>(std::round(static_cast<float>(v) * (1.0 - fs * (1.0 - f)))));
  const uint8_t sextants[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
  std::copy(sextants[i % 6], sextants[i % 6] + 3, rgb);
}

}  // namespace

Tensor adjust_brightness(const Tensor& image, double factor) {
  check_u8_image("adjust_brightness", image);
  check_factor("adjust_brightness", factor);
  return blend_image(image, factor, [](int64_t, int64_t) { return uint8_t{0}; });
}

Tensor adjust_contrast(const Tensor& image, double factor) {
  check_u8_image("adjust_contrast", image);
  check_factor("adjust_contrast", factor);
  const Tensor src = image.detach().contiguous();
  const int64_t channels = image.size(0), plane = image.size(1) * image.size(2);
  // ImageStat's mean of the L image, rounded as int(mean + 0.5).
  uint64_t sum = 0;
  for (int64_t i = 0; i < plane; ++i) sum += luma_at(src.data<uint8_t>(), plane, channels, i);
  const auto mean = static_cast<uint8_t>(
      static_cast<int64_t>(static_cast<double>(sum) / static_cast<double>(plane) + 0.5));
  return blend_image(src, factor, [mean](int64_t, int64_t) { return mean; });
}

Tensor adjust_saturation(const Tensor& image, double factor) {
  check_u8_image("adjust_saturation", image);
  check_factor("adjust_saturation", factor);
  const Tensor src = image.detach().contiguous();
  const int64_t channels = image.size(0), plane = image.size(1) * image.size(2);
  const uint8_t* in = src.data<uint8_t>();
  return blend_image(src, factor,
                     [&](int64_t, int64_t i) { return luma_at(in, plane, channels, i); });
}

Tensor adjust_hue(const Tensor& image, double hue_factor) {
  check_u8_image("adjust_hue", image);
  KILN_CHECK(hue_factor >= -0.5 && hue_factor <= 0.5, ValueError,
             "adjust_hue: hue_factor must be in [-0.5, 0.5], got {}", hue_factor);
  Tensor out = image.detach().contiguous().clone();
  if (image.size(0) == 1) return out;
  // numpy's uint8(hue_factor * 255): truncated toward zero, a negative shift wrapping around.
  const auto shift = static_cast<uint8_t>(static_cast<int64_t>(hue_factor * 255.0));
  const int64_t plane = image.size(1) * image.size(2);
  uint8_t* o = out.data<uint8_t>();
  for (int64_t i = 0; i < plane; ++i) {
    uint8_t rgb[3] = {o[i], o[plane + i], o[2 * plane + i]}, hsv[3];
    rgb_to_hsv(rgb, hsv);
    hsv[0] = static_cast<uint8_t>(hsv[0] + shift);
    hsv_to_rgb(hsv, rgb);
    for (int c = 0; c < 3; ++c) o[c * plane + i] = rgb[c];
  }
  return out;
}

Tensor color_jitter(const Tensor& image, const ColorJitterParams& params) {
  Tensor out = image;
  for (const int k : params.order) {
    KILN_CHECK(k >= 0 && k < 4, ValueError,
               "color_jitter: the order holds 0 (brightness), 1 (contrast), 2 (saturation) and "
               "3 (hue), got {}",
               k);
    const std::optional<double>& factor = params.factors[static_cast<size_t>(k)];
    if (!factor) continue;
    out = k == 0   ? adjust_brightness(out, *factor)
          : k == 1 ? adjust_contrast(out, *factor)
          : k == 2 ? adjust_saturation(out, *factor)
                   : adjust_hue(out, *factor);
  }
  return out;
}

}  // namespace kiln::data::functional
