#include "kiln/data/image/decode.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/open_error.h"
#include "kiln/core/profiler.h"
#include "kiln/data/image/codecs.h"

namespace kiln::data {
namespace {

// Closes a file descriptor on every way out of read_image.
struct Descriptor {
  explicit Descriptor(int descriptor) : fd(descriptor) {}
  ~Descriptor() { ::close(fd); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int fd;
};

}  // namespace

namespace codecs {

Pixels allocate_pixels(int64_t height, int64_t width, int channels, const std::string& name) {
  if (height < 1 || width < 1 || height > kMaxPixels / width)
    throw ImageDecodeError(
        fmt::format("read_image: {}: an image of {}x{} pixels (expected 1 to {} pixels)", name,
                    width, height, kMaxPixels));
  Pixels pixels;
  pixels.height = height;
  pixels.width = width;
  pixels.channels = channels;
  pixels.data.reset(new uint8_t[static_cast<size_t>(height * width * channels)]);
  return pixels;
}

}  // namespace codecs
namespace {

bool starts_with(std::span<const uint8_t> bytes, std::string_view magic, size_t at = 0) {
  return bytes.size() >= at + magic.size() &&
         std::memcmp(bytes.data() + at, magic.data(), magic.size()) == 0;
}

// What an unsupported file is, for the error message.
std::string describe_format(std::span<const uint8_t> bytes) {
  if (starts_with(bytes, "GIF8")) return "a GIF";
  if (starts_with(bytes, "BM")) return "a BMP";
  if (starts_with(bytes, "RIFF") && starts_with(bytes, "WEBP", 8)) return "a WebP";
  if (starts_with(bytes, std::string_view("II*\0", 4)) ||
      starts_with(bytes, std::string_view("MM\0*", 4)))
    return "a TIFF";
  if (bytes.empty()) return "an empty file";
  std::string first;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 4); ++i)
    first += fmt::format("{}{:02x}", i == 0 ? "" : " ", bytes[i]);
  return fmt::format("a file starting with the bytes {}", first);
}

// PIL's L conversion (libImaging/Convert.c, L24): ITU-R 601-2 luma in 16-bit fixed point.
uint8_t luma(uint8_t r, uint8_t g, uint8_t b) {
  return static_cast<uint8_t>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

// HWC pixels with 1-4 channels as stored -> CHW with `channels` (1, 3 or 4).
Tensor to_chw(const codecs::Pixels& pixels, int channels) {
  const int64_t plane = pixels.height * pixels.width;
  Tensor out = empty({channels, pixels.height, pixels.width}, DType::u8);
  uint8_t* o = out.data<uint8_t>();
  const uint8_t* in = pixels.data.get();
  const int stored = pixels.channels;
  const bool color = stored >= 3;
  const bool alpha = stored == 2 || stored == 4;
  for (int64_t i = 0; i < plane; ++i) {
    const uint8_t* p = in + i * stored;
    const uint8_t r = p[0], g = color ? p[1] : p[0], b = color ? p[2] : p[0];
    if (channels == 1) {
      o[i] = color ? luma(r, g, b) : r;
      continue;
    }
    o[i] = r;
    o[plane + i] = g;
    o[2 * plane + i] = b;
    if (channels == 4) o[3 * plane + i] = alpha ? p[stored - 1] : 255;
  }
  return out;
}

}  // namespace

Tensor decode_image(std::span<const uint8_t> bytes, const std::string& name,
                    const DecodeOptions& options) {
  profiler::RecordFunction range("decode_image");
  KILN_CHECK(options.channels == 1 || options.channels == 3 || options.channels == 4, ValueError,
             "decode_image: channels must be 1, 3 or 4, got {}", options.channels);
  KILN_CHECK(options.min_short_side >= 0, ValueError,
             "decode_image: min_short_side must be non-negative, got {}", options.min_short_side);
  codecs::Pixels pixels;
  if (starts_with(bytes, "\xff\xd8\xff"))
    pixels = codecs::decode_jpeg(bytes, name, options.min_short_side);
  else if (starts_with(bytes, "\x89PNG\r\n\x1a\n"))
    pixels = codecs::decode_png(bytes, name);
  else
    throw ImageDecodeError(
        fmt::format("read_image: {}: {}, which kiln does not decode (expected a JPEG or a PNG)",
                    name, describe_format(bytes)));
  return to_chw(pixels, options.channels);
}

Tensor read_image(const std::string& path, const DecodeOptions& options) {
  profiler::RecordFunction range("read_image");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw ImageDecodeError(
        fmt::format("read_image: cannot open {}: {}", path, open_failure_reason(path, errno)));
  const Descriptor file{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0)
    throw ImageDecodeError(
        fmt::format("read_image: cannot read {}: {}", path, std::strerror(errno)));
  if (S_ISDIR(info.st_mode))
    throw ImageDecodeError(
        fmt::format("read_image: cannot open {}: {}", path, open_failure_reason(path, EISDIR)));
  // Read straight into the buffer. The size fstat gives is a hint (a pipe has none, a file may
  // grow): one byte more lets the read that finds the end return 0 without growing it.
  std::vector<uint8_t> bytes(S_ISREG(info.st_mode) ? static_cast<size_t>(info.st_size) + 1 : 1);
  size_t used = 0;
  for (;;) {
    if (used == bytes.size()) bytes.resize(std::max<size_t>(2 * bytes.size(), 1 << 16));
    const ssize_t got = ::read(fd, bytes.data() + used, bytes.size() - used);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw ImageDecodeError(
          fmt::format("read_image: cannot read {}: {}", path, std::strerror(errno)));
    if (got == 0) break;
    used += static_cast<size_t>(got);
  }
  bytes.resize(used);
  return decode_image(bytes, path, options);
}

}  // namespace kiln::data
