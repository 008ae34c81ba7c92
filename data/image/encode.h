// Encoding a u8 [C, H, W] image (C = 1, 3 or 4) as PNG (libpng, lossless) or JPEG (libjpeg-turbo's
// TurboJPEG, 4:2:0 chroma subsampling as PIL's default; C = 1 or 3), to write image folders
// (kiln-make-imagefolder) and test files. A tensor that is not such an image throws ShapeError or
// DTypeError; a file that cannot be written throws Error naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::data {

std::vector<uint8_t> encode_png(const Tensor& image);
// quality: 1 (smallest) to 100 (best), as PIL's.
std::vector<uint8_t> encode_jpeg(const Tensor& image, int quality = 90);
// A u8 [4, H, W] image of CMYK samples as a YCCK JPEG (Photoshop's kind of CMYK file), the samples
// stored as given: Adobe's files, and decode_image, take them inverted (255 is no ink).
std::vector<uint8_t> encode_jpeg_cmyk(const Tensor& samples, int quality = 90);

// Writes `image` to `path` as PNG or JPEG, chosen by the name's extension (.png; .jpg or .jpeg).
void write_image(const std::string& path, const Tensor& image, int jpeg_quality = 90);

}  // namespace kiln::data
