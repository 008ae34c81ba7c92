// JPEG through libjpeg-turbo's TurboJPEG API. TurboJPEG's defaults are libjpeg's (the accurate
// integer IDCT, fancy upsampling), which PIL uses too, so a full-size decode gives PIL's pixels.
// CMYK and YCCK files (Adobe's print formats) come out as RGB the way PIL's convert("RGB") makes
// them, so an image folder torchvision reads is one kiln reads.
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

// PIL's reading of a 4-channel JPEG: libjpeg's samples (YCCK already turned into CMYK) taken as
// Adobe's inverted CMYK ("CMYK;I", as PIL assumes for every such file), then Image.convert("RGB"):
// with ink c and black k, each of R, G, B is nk - nk * c / 255 where nk = 255 - k, rounded as
// PIL's MULDIV255. With c = 255 - s and k = 255 - sk for the stored samples s and sk, that is
// sk - sk * (255 - s) / 255.
void cmyk_to_rgb(const uint8_t* cmyk, uint8_t* rgb, int64_t pixels) {
  for (int64_t i = 0; i < pixels; ++i, cmyk += 4, rgb += 3) {
    const int nk = cmyk[3];
    for (int c = 0; c < 3; ++c) {
      const int product = (255 - cmyk[c]) * nk + 128;
      rgb[c] = static_cast<uint8_t>(nk - (((product >> 8) + product) >> 8));
    }
  }
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
  const tjscalingfactor scale = pick_scale(width, height, min_short_side);
  const bool gray = colorspace == TJCS_GRAY;
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const int64_t out_height = TJSCALED(height, scale), out_width = TJSCALED(width, scale);
  Pixels pixels = allocate_pixels(out_height, out_width, gray ? 1 : 3, name);
  Pixels samples = cmyk ? allocate_pixels(out_height, out_width, 4, name) : Pixels{};
  const int format = gray ? TJPF_GRAY : cmyk ? TJPF_CMYK : TJPF_RGB;
  // A warning (data missing at the end, a corrupt segment) also fails: the pixels past it would be
  // libjpeg's gray filler, which PIL refuses to return for a truncated file too.
  if (tjDecompress2(handle.get(), data, size, cmyk ? samples.data.get() : pixels.data.get(),
                    static_cast<int>(out_width), 0, static_cast<int>(out_height), format,
                    TJFLAG_STOPONWARNING) != 0)
    fail(handle.get(), name, "a truncated or corrupt");
  if (cmyk) cmyk_to_rgb(samples.data.get(), pixels.data.get(), out_height * out_width);
  return pixels;
}

}  // namespace kiln::data::codecs
