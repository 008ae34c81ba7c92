// kiln::data::functional: torchvision.transforms.functional for one [C, H, W] image, with the
// arithmetic of the path torchvision's ImageFolder pipelines take: the transforms act on PIL
// images, and ToTensor comes last. So resize is Pillow's antialiased bilinear resampling (fixed
// point, a horizontal then a vertical pass, each rounded to u8), and the colour adjustments are
// ImageEnhance's blends. The results equal torchvision 0.14's with Pillow 9 on the same pixels
// (tests/torchvision).
//
// resize and the adjustments take u8 images (apply them before to_float, as torchvision applies
// them before ToTensor); crop and hflip take any dtype. C is 1 (gray), 3 (RGB) or 4: PIL
// premultiplies alpha when it resizes RGBA, kiln resizes the four channels alike (torchvision's
// loader converts to RGB, so its pipelines never resize RGBA).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <utility>

#include "kiln/core/shape.h"
#include "kiln/core/tensor.h"
#include "kiln/data/transforms.h"

namespace kiln::data::functional {

// The {height, width} that Resize(size) gives an image of height x width: the shorter side
// becomes `size` and the longer int(size * longer / shorter), as torchvision computes it.
Shape resized_shape(int64_t height, int64_t width, int64_t size);

// Bilinear with antialiasing to exactly {height, width}: Pillow's Image.resize(BILINEAR).
Tensor resize(const Tensor& image, const Shape& size_hw);

// The window of `height` x `width` at (top, left); pixels outside the image are 0 (PIL's crop).
Tensor crop(const Tensor& image, int64_t top, int64_t left, int64_t height, int64_t width);
// The centred window, rounding the offsets as torchvision (half to even) and padding with 0 where
// the window is larger than the image.
Tensor center_crop(const Tensor& image, const Shape& size_hw);
// crop, then resize to size_hw (torchvision's resized_crop).
Tensor resized_crop(const Tensor& image, int64_t top, int64_t left, int64_t height, int64_t width,
                    const Shape& size_hw);
// Mirrors the width axis.
Tensor hflip(const Tensor& image);

// ImageEnhance.Brightness, Contrast and Color (saturation): a blend of the image with a black
// image, a gray image of its mean luma, and its own luma, by `factor` (1 leaves the image; factors
// outside [0, 1] extrapolate and clip to [0, 255]).
Tensor adjust_brightness(const Tensor& image, double factor);
Tensor adjust_contrast(const Tensor& image, double factor);
Tensor adjust_saturation(const Tensor& image, double factor);
// torchvision's adjust_hue on a PIL image: the image converted to HSV as Pillow converts it (u8
// hue, saturation and value), the hue moved by uint8(hue_factor * 255) around the circle (255
// wraps to 0), and converted back. hue_factor in [-0.5, 0.5]; a gray image is returned as it is,
// and alpha is kept (Pillow's HSV round trip would make it opaque).
Tensor adjust_hue(const Tensor& image, double hue_factor);

// ColorJitter's random choices (torchvision's get_params): the order of its four adjustments
// (0 brightness, 1 contrast, 2 saturation, 3 hue) and the factor of each, nullopt for one left
// out. color_jitter(image, params) applies them in that order, as ColorJitter.forward does.
struct ColorJitterParams {
  std::array<int, 4> order = {0, 1, 2, 3};
  std::array<std::optional<double>, 4> factors = {};
};
Tensor color_jitter(const Tensor& image, const ColorJitterParams& params);

// RandomResizedCrop's window for an image of height x width (torchvision's get_params): up to ten
// tries of an area fraction uniform in `scale` and an aspect ratio w/h log-uniform in `ratio`,
// then the centred window of the image clipped to the ratio range.
struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};
CropBox random_resized_crop_box(int64_t height, int64_t width, std::pair<double, double> scale,
                                std::pair<double, double> ratio, Rng& rng);

}  // namespace kiln::data::functional
