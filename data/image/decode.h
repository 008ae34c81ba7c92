// Decoding an image file into a u8 [C, H, W] tensor: JPEG with libjpeg-turbo's TurboJPEG API, PNG
// with libpng, told apart by their first bytes (not by the file's name). The pixels are PIL's for
// the same file, which is what torchvision's ImageFolder reads with, except where a JPEG is decoded
// at a reduced scale (min_short_side) and for 16-bit grayscale PNGs (kiln keeps the high byte; PIL
// clips the 16-bit value to 255).
//
// A file that cannot be read, is truncated or corrupt, or is of a kind kiln does not decode throws
// ImageDecodeError naming the file; the decoders' errors never end the process.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln::data {

class ImageDecodeError : public Error {
  using Error::Error;
};

struct DecodeOptions {
  // 1 (grayscale), 3 (RGB) or 4 (RGBA), converted as PIL's Image.convert does: gray is
  // (19595 R + 38470 G + 7471 B + 2^15) >> 16, alpha is dropped or added as 255.
  int channels = 3;
  // JPEG only: decode at the smallest of libjpeg-turbo's DCT scales (1/8, 1/4, 3/8, ..., 1) whose
  // shorter side is still at least this many pixels, which is several times faster for a target
  // much smaller than the file. 0 decodes at full size (PIL's and torchvision's pixels).
  int64_t min_short_side = 0;
};

// Decodes the bytes of one JPEG or PNG file; `name` is the file's name in error messages.
Tensor decode_image(std::span<const uint8_t> bytes, const std::string& name,
                    const DecodeOptions& options = {});

// Reads and decodes the file at `path`.
Tensor read_image(const std::string& path, const DecodeOptions& options = {});

}  // namespace kiln::data
