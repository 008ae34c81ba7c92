// decode_image and the encoders: PNG round trips exactly, JPEG closely, PIL's channel conversions,
// reduced-scale JPEG decoding, and every truncated or corrupted file either decodes or throws
// ImageDecodeError naming it (the sanitizer build runs these mutations under ASan).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "temp_dir.h"

using namespace kiln;
using Catch::Contains;
using data::DecodeOptions;
using data::ImageDecodeError;
using kiln::testing::TempDir;

namespace {

using Bytes = std::vector<uint8_t>;

// A u8 image whose pixels are a function of (c, y, x, seed), with smooth and sharp parts.
Tensor pattern(int64_t channels, int64_t height, int64_t width, int seed = 0) {
  Tensor image = empty({channels, height, width}, DType::u8);
  uint8_t* p = image.data<uint8_t>();
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < height; ++y)
      for (int64_t x = 0; x < width; ++x)
        *p++ = static_cast<uint8_t>(
            (x * 9 + y * 5 + c * 70 + seed * 31 + (x / 4 + y / 4) % 2 * 40) % 256);
  return image;
}

// The largest |a - b| over all pixels of two u8 images of one shape.
int max_difference(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  int worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, std::abs(int{a.data<uint8_t>()[i]} - int{b.data<uint8_t>()[i]}));
  return worst;
}

Tensor decode(const Bytes& bytes, int channels, int64_t min_short_side = 0) {
  return data::decode_image(bytes, "test.img",
                            DecodeOptions{.channels = channels, .min_short_side = min_short_side});
}

uint8_t at(const Tensor& image, int64_t c, int64_t y, int64_t x) {
  return image.data<uint8_t>()[(c * image.size(1) + y) * image.size(2) + x];
}

}  // namespace

TEST_CASE("PNG round-trips gray, RGB and RGBA images exactly") {
  for (int64_t channels : {1, 3, 4}) {
    const Tensor image = pattern(channels, 7, 13, static_cast<int>(channels));
    const Tensor back = decode(data::encode_png(image), static_cast<int>(channels));
    CHECK(back.shape() == image.shape());
    CHECK(equal(back, image));
  }
}

TEST_CASE("decode_image converts channels as PIL's Image.convert") {
  const Tensor rgba = pattern(4, 5, 6, 3);
  const Bytes png = data::encode_png(rgba);
  const Tensor gray = decode(png, 1), rgb = decode(png, 3);
  REQUIRE(gray.shape() == Shape{1, 5, 6});
  REQUIRE(rgb.shape() == Shape{3, 5, 6});
  for (int64_t y = 0; y < 5; ++y)
    for (int64_t x = 0; x < 6; ++x) {
      const unsigned r = at(rgba, 0, y, x), g = at(rgba, 1, y, x), b = at(rgba, 2, y, x);
      CHECK(at(gray, 0, y, x) == ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16));
      for (int64_t c = 0; c < 3; ++c) CHECK(at(rgb, c, y, x) == at(rgba, c, y, x));
    }
  const Tensor one = pattern(1, 4, 4);
  const Tensor expanded = decode(data::encode_png(one), 4);
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t x = 0; x < 4; ++x) {
      for (int64_t c = 0; c < 3; ++c) CHECK(at(expanded, c, y, x) == at(one, 0, y, x));
      CHECK(at(expanded, 3, y, x) == 255);
    }
  CHECK_THROWS_AS(decode(png, 2), ValueError);
}

TEST_CASE("JPEG decodes close to the encoded image, and at a reduced scale when asked") {
  // Smooth ramps, a different one per channel: JPEG at quality 95 keeps them within a few levels.
  Tensor image = empty({3, 48, 64}, DType::u8);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 48; ++y)
      for (int64_t x = 0; x < 64; ++x)
        image.data<uint8_t>()[(c * 48 + y) * 64 + x] =
            static_cast<uint8_t>(c == 0   ? 3 * x
                                 : c == 1 ? 4 * y
                                          : 250 - 2 * x - y);
  const Bytes jpeg = data::encode_jpeg(image, 95);
  const Tensor full = decode(jpeg, 3);
  REQUIRE(full.shape() == image.shape());
  CHECK(max_difference(full, image) <= 6);

  const Tensor gray = decode(data::encode_jpeg(pattern(1, 16, 16), 100), 1);
  CHECK(max_difference(gray, pattern(1, 16, 16)) <= 4);

  // libjpeg-turbo's scales of a 64x48 image: 1/8 -> 8x6, 1/4 -> 16x12, 3/8 -> 24x18.
  CHECK(decode(jpeg, 3, 12).shape() == Shape{3, 12, 16});
  CHECK(decode(jpeg, 3, 13).shape() == Shape{3, 18, 24});
  CHECK(decode(jpeg, 3, 48).shape() == Shape{3, 48, 64});
  CHECK(decode(jpeg, 3, 200).shape() == Shape{3, 48, 64});  // never above full size
  // The reduced decode is the image, smaller: its mean stays the full decode's.
  CHECK(decode(jpeg, 3, 12).to(DType::f32).mean().item() ==
        Approx(full.to(DType::f32).mean().item()).margin(3.0));
}

TEST_CASE("decode_image names the file and the format it does not decode") {
  const Bytes gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0};
  CHECK_THROWS_WITH(data::decode_image(gif, "cat.gif"), Contains("cat.gif") && Contains("GIF"));
  CHECK_THROWS_AS(data::decode_image(Bytes{}, "empty.png"), ImageDecodeError);
  CHECK_THROWS_WITH(data::decode_image(Bytes{1, 2, 3}, "x.jpg"),
                    Contains("x.jpg") && Contains("01 02 03"));
  CHECK_THROWS_WITH(data::read_image("/nonexistent/kiln/a.png"),
                    Contains("cannot open /nonexistent/kiln/a.png"));

  TempDir dir("kiln_decode");
  const Bytes png = data::encode_png(pattern(3, 8, 8));
  const std::string path = dir.file("cut.png");
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(png.data()),
             static_cast<std::streamsize>(png.size() / 2));
  CHECK_THROWS_WITH(data::read_image(path), Contains(path) && Contains("truncated or corrupt PNG"));
  data::write_image(dir.file("whole.png"), pattern(3, 8, 8));
  CHECK(equal(data::read_image(dir.file("whole.png")), pattern(3, 8, 8)));
  CHECK_THROWS_AS(data::write_image(dir.file("a.bmp"), pattern(3, 8, 8)), ValueError);
  CHECK_THROWS_AS(data::encode_jpeg(pattern(4, 8, 8)), ShapeError);
}

// Photoshop's CMYK files are YCCK JPEGs with inverted samples (255: no ink). PIL reads them and
// converts to RGB as R = (255 - K) * (1 - C / 255) with C = 255 - sample; kiln the same (the
// comparison with PIL itself, on PIL's own CMYK file too, is tests/torchvision's).
TEST_CASE("CMYK (YCCK) JPEGs decode to PIL's RGB") {
  Tensor samples = empty({4, 16, 24}, DType::u8);
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t y = 0; y < 16; ++y)
      for (int64_t x = 0; x < 24; ++x)
        samples.data<uint8_t>()[(c * 16 + y) * 24 + x] =
            static_cast<uint8_t>(c == 3 ? 255 - 4 * y : 255 - 10 * x + 60 * c % 200 - 2 * y);
  const Bytes jpeg = data::encode_jpeg_cmyk(samples, 100);
  const Tensor rgb = decode(jpeg, 3);
  REQUIRE(rgb.shape() == Shape{3, 16, 24});
  int worst = 0;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 16; ++y)
      for (int64_t x = 0; x < 24; ++x) {
        const double ink = 255.0 - at(samples, c, y, x), black = 255.0 - at(samples, 3, y, x);
        const double want = (255.0 - black) * (1.0 - ink / 255.0);
        worst = std::max(worst, static_cast<int>(std::lround(std::abs(at(rgb, c, y, x) - want))));
      }
  CHECK(worst <= 3);  // JPEG's loss at quality 100, and rounding
  CHECK(decode(jpeg, 1).shape() == Shape{1, 16, 24});
  CHECK(decode(jpeg, 3, 8).shape() == Shape{3, 8, 12});
  CHECK_THROWS_AS(data::encode_jpeg_cmyk(pattern(3, 8, 8)), ShapeError);
}

TEST_CASE("read_image says why a file does not open") {
  TempDir dir("kiln_open");
  const std::string missing = dir.file("gone.png"), link = dir.file("link.png");
  std::filesystem::create_symlink(missing, link);
  CHECK_THROWS_WITH(data::read_image(link), Contains(link) &&
                                                Contains("symbolic link to '" + missing) &&
                                                Contains("does not exist"));
  const std::string a = dir.file("a.png"), b = dir.file("b.png");
  std::filesystem::create_symlink(b, a);
  std::filesystem::create_symlink(a, b);
  CHECK_THROWS_WITH(data::read_image(a), Contains(a) && Contains("loop of symbolic links"));
  std::filesystem::create_directory(dir.file("folder.png"));
  CHECK_THROWS_WITH(data::read_image(dir.file("folder.png")), Contains("a folder, not a file"));
  CHECK_THROWS_WITH(data::read_image(missing), Contains(missing) && Contains("no such file"));
}

// Cut at every length, and bytes overwritten at random (a Philox-seeded choice of position and
// value, 1 to 4 bytes a file): each file decodes to a well-formed image or throws
// ImageDecodeError, never anything else, and never crashes.
TEST_CASE("truncated and corrupted JPEG and PNG files fail cleanly") {
  const Tensor image = pattern(3, 24, 20);
  for (const Bytes& original :
       {data::encode_png(image), data::encode_jpeg(image, 80), data::encode_png(pattern(1, 9, 9)),
        data::encode_jpeg(pattern(1, 17, 9), 50), data::encode_jpeg_cmyk(pattern(4, 11, 13), 70)}) {
    int decoded = 0, rejected = 0;
    auto attempt = [&](const Bytes& bytes) {
      try {
        const Tensor out = decode(bytes, 3, 4);
        CHECK(out.dim() == 3);
        CHECK(out.size(0) == 3);
        ++decoded;
      } catch (const ImageDecodeError& e) {
        CHECK_THAT(e.what(), Contains("test.img"));
        ++rejected;
      }
    };
    for (size_t length = 0; length < original.size(); ++length)
      attempt(Bytes(original.begin(), original.begin() + static_cast<std::ptrdiff_t>(length)));
    data::Rng rng(2025, original.size());
    for (int m = 0; m < 1500; ++m) {
      Bytes bytes = original;
      const int64_t edits = rng.randint(1, 5);
      for (int64_t e = 0; e < edits; ++e)
        bytes[static_cast<size_t>(rng.randint(0, static_cast<int64_t>(bytes.size())))] =
            static_cast<uint8_t>(rng.randint(0, 256));
      attempt(bytes);
    }
    // Every cut before the end is refused (the last bytes of both formats are required markers).
    CHECK(rejected >= static_cast<int>(original.size()));
    CHECK(decoded > 0);
  }
}
