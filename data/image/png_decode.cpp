// PNG through libpng. libpng reports errors by longjmp to a setjmp point, which must not jump
// over a C++ object with a destructor. So the two calls that can fail (reading the header,
// reading the rows) each sit in a function holding only trivial locals, which sets the jump
// point, records libpng's message in a plain buffer and returns false; the C++ code around them
// owns the memory and throws ImageDecodeError.
#include <fmt/format.h>
#include <png.h>

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/data/image/codecs.h"
#include "kiln/data/image/decode.h"

namespace kiln::data::codecs {
namespace {

// What the callbacks see through png_get_error_ptr / png_get_io_ptr.
struct PngSource {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t offset = 0;
  char message[256] = {};
};

// png's error callback: keep the message and jump back to the setjmp of the failing call.
void on_error(png_structp png, png_const_charp message) {
  auto* source = static_cast<PngSource*>(png_get_error_ptr(png));
  std::strncpy(source->message, message, sizeof(source->message) - 1);
  png_longjmp(png, 1);
}

// Warnings (an ancillary chunk with a bad CRC, a benign error) leave the image readable, as in PIL.
void on_warning(png_structp, png_const_charp) {}

void read_bytes(png_structp png, png_bytep out, size_t count) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (source->size - source->offset < count) png_error(png, "the file ends early");
  std::memcpy(out, source->data + source->offset, count);
  source->offset += count;
}

struct Header {
  png_uint_32 width = 0, height = 0;
  int channels = 0;
};

// Reads the header and asks for 8-bit samples in 1-4 channels; false on a libpng error.
bool read_header(png_structp png, png_infop info, Header* header) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  const int color_type = png_get_color_type(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  // PIL reads 16-bit color as its high byte, as png_set_strip_16 does.
  png_set_strip_16(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  header->width = png_get_image_width(png, info);
  header->height = png_get_image_height(png, info);
  header->channels = png_get_channels(png, info);
  return true;
}

// Reads every row (and the chunks after them); false on a libpng error.
bool read_rows(png_structp png, png_infop info, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, info);
  return true;
}

struct ReadStruct {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~ReadStruct() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

}  // namespace

Pixels decode_png(std::span<const uint8_t> bytes, const std::string& name) {
  PngSource source{.data = bytes.data(), .size = bytes.size()};
  ReadStruct read;
  read.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &source, on_error, on_warning);
  if (read.png) read.info = png_create_info_struct(read.png);
  if (!read.png || !read.info)
    throw ImageDecodeError(fmt::format("read_image: {}: libpng could not start", name));
  png_set_read_fn(read.png, &source, read_bytes);

  Header header;
  if (!read_header(read.png, read.info, &header))
    throw ImageDecodeError(
        fmt::format("read_image: {}: not a readable PNG ({})", name, source.message));
  if (header.channels < 1 || header.channels > 4)
    throw ImageDecodeError(
        fmt::format("read_image: {}: a PNG with {} channels after expansion (expected 1 to 4)",
                    name, header.channels));
  Pixels pixels = allocate_pixels(header.height, header.width, header.channels, name);
  const auto row_bytes = static_cast<size_t>(pixels.width) * static_cast<size_t>(header.channels);
  if (png_get_rowbytes(read.png, read.info) != row_bytes)
    throw ImageDecodeError(fmt::format("read_image: {}: a PNG row holds {} bytes, expected {}",
                                       name, png_get_rowbytes(read.png, read.info), row_bytes));
  std::vector<png_bytep> rows(static_cast<size_t>(pixels.height));
  for (size_t r = 0; r < rows.size(); ++r) rows[r] = pixels.data.get() + r * row_bytes;
  if (!read_rows(read.png, read.info, rows.data()))
    throw ImageDecodeError(
        fmt::format("read_image: {}: a truncated or corrupt PNG ({})", name, source.message));
  return pixels;
}

}  // namespace kiln::data::codecs
