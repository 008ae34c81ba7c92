// The two decoders behind decode_image (data/image/decode.h): each returns the pixels as stored,
// interleaved (HWC), 8 bits per sample, with 1 (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA)
// channels, and throws ImageDecodeError naming the file.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace kiln::data::codecs {

struct Pixels {
  int64_t height = 0;
  int64_t width = 0;
  int channels = 0;
  std::unique_ptr<uint8_t[]> data;  // height * width * channels bytes
};

// PIL's limit on the pixels of one image (twice its MAX_IMAGE_PIXELS, where it stops warning and
// refuses): a corrupt header cannot make a decoder allocate gigabytes.
constexpr int64_t kMaxPixels = 178956970;

// Uninitialised storage for height x width x channels bytes, after checking the limit.
Pixels allocate_pixels(int64_t height, int64_t width, int channels, const std::string& name);

// min_short_side as in DecodeOptions.
Pixels decode_jpeg(std::span<const uint8_t> bytes, const std::string& name, int64_t min_short_side);
Pixels decode_png(std::span<const uint8_t> bytes, const std::string& name);

}  // namespace kiln::data::codecs
