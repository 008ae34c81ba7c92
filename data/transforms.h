// Transforms on one CHW image, as torchvision's: each is a function of the image and an Rng, so a
// random transform's choices depend only on how the Rng was seeded (the DataLoader seeds one per
// sample from (seed, epoch, index), which keeps results independent of the worker count).
// Transforms never modify their input; a transform that does nothing may return it unchanged.
// They are called from several DataLoader workers at once and so must keep no mutable state.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "kiln/core/philox.h"
#include "kiln/core/tensor.h"

namespace kiln::data {

// A small deterministic generator: word k of the Philox stream (seed, stream), k = 0, 1, 2, ...
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}

  uint32_t next_u32() { return philox_word(seed_, stream_, counter_++); }
  double uniform();                            // [0, 1), 53 random bits
  double uniform(double low, double high);     // [low, high)
  int64_t randint(int64_t low, int64_t high);  // [low, high), unbiased; throws unless low < high

 private:
  uint64_t seed_;
  uint64_t stream_;
  uint64_t counter_ = 0;
};

using Transform = std::function<Tensor(const Tensor&, Rng&)>;

// u8 -> f32 scaled by 1/255 (torchvision's ToTensor on an image already in CHW order).
Transform to_float();
// (x - mean[c]) / std[c] per channel of an f32 or f64 image; one value applies to every channel.
Transform normalize(std::vector<double> mean, std::vector<double> std);
// A random size x size window of the image zero-padded by `padding` on every side
// (RandomCrop(size, padding=padding)).
Transform random_crop(int64_t size, int64_t padding = 0);
// The same with a {height, width} window.
Transform random_crop(Shape size_hw, int64_t padding = 0);
// Mirrors the width axis with probability p.
Transform random_horizontal_flip(double p = 0.5);
// With probability p, sets a random rectangle to `value`: its area is a fraction of the image
// drawn from `scale`, its aspect ratio h/w log-uniform in `ratio`; after ten rectangles that do
// not fit, leaves the image unchanged (RandomErasing).
Transform random_erasing(double p = 0.5, std::pair<double, double> scale = {0.02, 0.33},
                         std::pair<double, double> ratio = {0.3, 3.3}, double value = 0.0);

// torchvision's transforms for photos, on u8 images as torchvision's act on PIL images (before
// to_float, its ToTensor), with Pillow's arithmetic (data/image/ops.h), so the same image and the
// same random choices give torchvision's pixels:
//   compose({random_resized_crop(224), random_horizontal_flip(), to_float(),
//            normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})})  // training
//   compose({resize(256), center_crop(224), to_float(), normalize(...)})  // evaluation
//
// Resize(size): the shorter side to `size`, the longer int(size * longer / shorter); bilinear
// with antialiasing (Pillow's resampling).
Transform resize(int64_t size);
// Resize((height, width)).
Transform resize(Shape size_hw);
// CenterCrop: the centred size x size window, padded with 0 where the image is smaller.
Transform center_crop(int64_t size);
Transform center_crop(Shape size_hw);
// RandomResizedCrop: a window of a random area fraction in `scale` and aspect ratio (w/h)
// log-uniform in `ratio`, ten tries, then the centred fallback; resized to size x size.
Transform random_resized_crop(int64_t size, std::pair<double, double> scale = {0.08, 1.0},
                              std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0});
Transform random_resized_crop(Shape size_hw, std::pair<double, double> scale = {0.08, 1.0},
                              std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0});
// ColorJitter(brightness, contrast, saturation, hue): brightness, contrast and saturation factors
// uniform in [max(0, 1 - v), 1 + v], the hue's in [-hue, hue] (hue at most 0.5); the four
// adjustments in a random order, as torchvision (functional::color_jitter); 0 leaves one out.
Transform color_jitter(double brightness = 0.0, double contrast = 0.0, double saturation = 0.0,
                       double hue = 0.0);
// The same with explicit {min, max} ranges of the factors ({1, 1} leaves one of the first three
// out, {0, 0} the hue; the hue's range lies within [-0.5, 0.5]).
Transform color_jitter(std::pair<double, double> brightness, std::pair<double, double> contrast,
                       std::pair<double, double> saturation,
                       std::pair<double, double> hue = {0.0, 0.0});

// Applies each transform in turn.
Transform compose(std::vector<Transform> transforms);

}  // namespace kiln::data
