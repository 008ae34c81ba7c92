// PNG through libpng's simplified API (png_image_*), which keeps libpng's longjmp inside libpng
// and reports errors in its result; JPEG through TurboJPEG.
#include "kiln/data/image/encode.h"

#include <fmt/format.h>
#include <png.h>
#include <turbojpeg.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <ios>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::data {
namespace {

// The image as HWC bytes, after checking it is a u8 CHW image with `channels` allowed.
std::vector<uint8_t> interleave(const char* op, const Tensor& image, bool allow_alpha) {
  KILN_CHECK(image.defined() && image.dim() == 3, ShapeError,
             "{}: expected a CHW image with 3 dims, got shape {}", op,
             image.defined() ? shape_str(image.shape()) : std::string("(undefined)"));
  KILN_CHECK(image.dtype() == DType::u8, DTypeError, "{}: expected a u8 image, got {}", op,
             dtype_name(image.dtype()));
  const int64_t channels = image.size(0), plane = image.size(1) * image.size(2);
  KILN_CHECK(channels == 1 || channels == 3 || (allow_alpha && channels == 4), ShapeError,
             "{}: expected 1, 3{} channels, got shape {}", op, allow_alpha ? " or 4" : "",
             shape_str(image.shape()));
  KILN_CHECK(plane > 0, ShapeError, "{}: expected a non-empty image, got shape {}", op,
             shape_str(image.shape()));
  const Tensor src = image.detach().cpu().contiguous();
  const uint8_t* in = src.data<uint8_t>();
  std::vector<uint8_t> hwc(static_cast<size_t>(channels * plane));
  for (int64_t i = 0; i < plane; ++i)
    for (int64_t c = 0; c < channels; ++c)
      hwc[static_cast<size_t>(i * channels + c)] = in[c * plane + i];
  return hwc;
}

struct HandleDeleter {
  void operator()(void* handle) const { tjDestroy(handle); }
};
struct TurboBufferDeleter {
  void operator()(unsigned char* buffer) const { tjFree(buffer); }
};

// TurboJPEG's compression of HWC samples in `format`, chroma subsampled as `subsampling`.
std::vector<uint8_t> compress(const char* op, std::vector<uint8_t>& hwc, const Tensor& image,
                              int format, int subsampling, int quality) {
  KILN_CHECK(quality >= 1 && quality <= 100, ValueError, "{}: quality must be in [1, 100], got {}",
             op, quality);
  std::unique_ptr<void, HandleDeleter> handle(tjInitCompress());
  if (!handle)
    throw Error(fmt::format("{}: TurboJPEG could not start: {}", op, tjGetErrorStr2(nullptr)));
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int status =
      tjCompress2(handle.get(), hwc.data(), static_cast<int>(image.size(2)), 0,
                  static_cast<int>(image.size(1)), format, &buffer, &size, subsampling, quality, 0);
  std::unique_ptr<unsigned char, TurboBufferDeleter> owned(buffer);
  if (status != 0)
    throw Error(fmt::format("{}: TurboJPEG failed: {}", op, tjGetErrorStr2(handle.get())));
  return std::vector<uint8_t>(buffer, buffer + size);
}

}  // namespace

std::vector<uint8_t> encode_png(const Tensor& image) {
  std::vector<uint8_t> hwc = interleave("encode_png", image, /*allow_alpha=*/true);
  png_image desc{};
  desc.version = PNG_IMAGE_VERSION;
  desc.width = static_cast<png_uint_32>(image.size(2));
  desc.height = static_cast<png_uint_32>(image.size(1));
  const int64_t channels = image.size(0);
  desc.format = channels == 1 ? PNG_FORMAT_GRAY : channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&desc, nullptr, &size, 0, hwc.data(), 0, nullptr))
    throw Error(fmt::format("encode_png: libpng failed: {}", desc.message));
  std::vector<uint8_t> out(size);
  if (!png_image_write_to_memory(&desc, out.data(), &size, 0, hwc.data(), 0, nullptr))
    throw Error(fmt::format("encode_png: libpng failed: {}", desc.message));
  out.resize(size);
  return out;
}

std::vector<uint8_t> encode_jpeg(const Tensor& image, int quality) {
  std::vector<uint8_t> hwc = interleave("encode_jpeg", image, /*allow_alpha=*/false);
  const bool gray = image.size(0) == 1;
  return compress("encode_jpeg", hwc, image, gray ? TJPF_GRAY : TJPF_RGB,
                  gray ? TJSAMP_GRAY : TJSAMP_420, quality);
}

std::vector<uint8_t> encode_jpeg_cmyk(const Tensor& samples, int quality) {
  KILN_CHECK(samples.defined() && samples.dim() == 3 && samples.size(0) == 4, ShapeError,
             "encode_jpeg_cmyk: expected a [4, H, W] image (C, M, Y, K), got shape {}",
             samples.defined() ? shape_str(samples.shape()) : std::string("(undefined)"));
  std::vector<uint8_t> hwc = interleave("encode_jpeg_cmyk", samples, /*allow_alpha=*/true);
  // TurboJPEG writes CMYK samples as YCCK with an Adobe marker, as Photoshop does.
  return compress("encode_jpeg_cmyk", hwc, samples, TJPF_CMYK, TJSAMP_444, quality);
}

void write_image(const std::string& path, const Tensor& image, int jpeg_quality) {
  std::string extension = std::filesystem::path(path).extension().string();
  for (char& c : extension) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  std::vector<uint8_t> bytes;
  if (extension == ".png")
    bytes = encode_png(image);
  else if (extension == ".jpg" || extension == ".jpeg")
    bytes = encode_jpeg(image, jpeg_quality);
  else
    throw ValueError(
        fmt::format("write_image: {}: expected a name ending in .png, .jpg or .jpeg, got '{}'",
                    path, extension));
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw Error(fmt::format("write_image: cannot write {}", path));
}

}  // namespace kiln::data
