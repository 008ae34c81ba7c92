// JPEG through libjpeg-turbo's TurboJPEG API. TurboJPEG's defaults are libjpeg's (the accurate
// integer IDCT, fancy upsampling), which PIL uses too, so a full-size decode gives PIL's pixels.
#include <fmt/format.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kiln/data/image/codecs.h"
#include "kiln/data/image/decode.h"

namespace kiln::data::codecs {
namespace {

struct HandleDeleter {
  void operator()(void* handle) const { tjDestroy(handle); }
};
using Handle = std::unique_ptr<void, HandleDeleter>;

[[noreturn]] void fail(void* handle, const std::string& name, const char* what) {
  throw ImageDecodeError(
      fmt::format("read_image: {}: {} JPEG ({})", name, what, tjGetErrorStr2(handle)));
}

// The smallest scale (num/denom <= 1) whose shorter side is still at least min_short_side.
tjscalingfactor pick_scale(int width, int height, int64_t min_short_side) {
  tjscalingfactor best{1, 1};
  if (min_short_side <= 0) return best;
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  int best_side = std::min(width, height);
  for (int i = 0; i < count; ++i) {
    const tjscalingfactor f = factors[i];
    if (f.num > f.denom) continue;
    const int side = std::min(TJSCALED(width, f), TJSCALED(height, f));
    if (side >= min_short_side && side < best_side) {
      best = f;
      best_side = side;
    }
  }
  return best;
}

}  // namespace

Pixels decode_jpeg(std::span<const uint8_t> bytes, const std::string& name,
                   int64_t min_short_side) {
  Handle handle(tjInitDecompress());
  if (!handle)
    throw ImageDecodeError(fmt::format("read_image: {}: TurboJPEG could not start ({})", name,
                                       tjGetErrorStr2(nullptr)));
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  // TurboJPEG takes a non-const buffer in its 2.x API but does not write to it.
  auto* data = const_cast<unsigned char*>(bytes.data());
  const auto size = static_cast<unsigned long>(bytes.size());
  if (tjDecompressHeader3(handle.get(), data, size, &width, &height, &subsampling, &colorspace) !=
      0)
    fail(handle.get(), name, "not a readable");
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK)
    throw ImageDecodeError(fmt::format(
        "read_image: {}: a CMYK JPEG, which kiln does not decode (expected grayscale or color)",
        name));
  const tjscalingfactor scale = pick_scale(width, height, min_short_side);
  const int gray = colorspace == TJCS_GRAY;
  Pixels pixels =
      allocate_pixels(TJSCALED(height, scale), TJSCALED(width, scale), gray ? 1 : 3, name);
  // A warning (data missing at the end, a corrupt segment) also fails: the pixels past it would be
  // libjpeg's gray filler, which PIL refuses to return for a truncated file too.
  if (tjDecompress2(handle.get(), data, size, pixels.data.get(), static_cast<int>(pixels.width), 0,
                    static_cast<int>(pixels.height), gray ? TJPF_GRAY : TJPF_RGB,
                    TJFLAG_STOPONWARNING) != 0)
    fail(handle.get(), name, "a truncated or corrupt");
  return pixels;
}

}  // namespace kiln::data::codecs
