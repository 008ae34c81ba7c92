// Pillow's ImageEnhance on u8 images: enhance(factor) is Image.blend(degenerate, image, factor),
// computed as libImaging/Blend.c does, in single precision (Pillow passes the factor as a C float)
// and truncated to u8; outside [0, 1] the blend is clipped to [0, 255] first.
#include <cstdint>
#include <string>

#include "kiln/core/error.h"
#include "kiln/data/image/ops.h"

namespace kiln::data::functional {
namespace {

void check_u8_image(const char* op, const Tensor& image, double factor) {
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

}  // namespace

Tensor adjust_brightness(const Tensor& image, double factor) {
  check_u8_image("adjust_brightness", image, factor);
  return blend_image(image, factor, [](int64_t, int64_t) { return uint8_t{0}; });
}

Tensor adjust_contrast(const Tensor& image, double factor) {
  check_u8_image("adjust_contrast", image, factor);
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
  check_u8_image("adjust_saturation", image, factor);
  const Tensor src = image.detach().contiguous();
  const int64_t channels = image.size(0), plane = image.size(1) * image.size(2);
  const uint8_t* in = src.data<uint8_t>();
  return blend_image(src, factor,
                     [&](int64_t, int64_t i) { return luma_at(in, plane, channels, i); });
}

}  // namespace kiln::data::functional
