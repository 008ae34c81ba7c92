// Pillow's resampling (libImaging/Resample.c) for 8-bit images, bilinear filter: per output pixel
// a window of input pixels weighted by the triangle filter stretched by the downscale factor (the
// antialiasing), weights normalised to sum 1 and stored in 22-bit fixed point; a horizontal pass
// into a u8 buffer, then a vertical pass. Each step is Pillow's, so the pixels are its pixels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/data/image/ops.h"

namespace kiln::data::functional {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

// The weights of each output pixel over input pixels [first, first + count).
struct Coefficients {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;  // out_size x ksize
};

double bilinear(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// precompute_coeffs and normalize_coeffs_8bpc for the box [0, in_size) of the input.
Coefficients coefficients(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;  // the bilinear filter's support is 1
  Coefficients c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<size_t>(out_size));
  c.count.resize(static_cast<size_t>(out_size));
  c.weights.assign(static_cast<size_t>(out_size) * static_cast<size_t>(c.ksize), 0);
  std::vector<double> k(static_cast<size_t>(c.ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filter_scale;
    // Pillow truncates toward zero here ((int) casts), then clamps.
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double total = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[static_cast<size_t>(x)] = bilinear((x + xmin - center + 0.5) * ss);
      total += k[static_cast<size_t>(x)];
    }
    for (int x = 0; x < xmax; ++x) {
      const double w = total != 0.0 ? k[static_cast<size_t>(x)] / total : k[static_cast<size_t>(x)];
      const double fixed = w * (1 << kPrecisionBits);
      c.weights[static_cast<size_t>(xx) * static_cast<size_t>(c.ksize) + static_cast<size_t>(x)] =
          static_cast<int32_t>(w < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
    c.first[static_cast<size_t>(xx)] = xmin;
    c.count[static_cast<size_t>(xx)] = xmax;
  }
  return c;
}

uint8_t clip8(int32_t sum) {
  return static_cast<uint8_t>(std::clamp(sum >> kPrecisionBits, 0, 255));
}

// One pass along rows (stride 1 between taps) or columns (stride = row length): out[i] of each
// line is the weighted sum of its window. lines x in_size -> lines x out_size, both with the given
// strides between neighbouring pixels and between lines.
void resample(const uint8_t* in, uint8_t* out, int lines, const Coefficients& c, int out_size,
              int64_t in_tap, int64_t in_line, int64_t out_tap, int64_t out_line) {
  for (int line = 0; line < lines; ++line) {
    const uint8_t* src = in + line * in_line;
    uint8_t* dst = out + line * out_line;
    for (int i = 0; i < out_size; ++i) {
      const int32_t* w = c.weights.data() + static_cast<size_t>(i) * static_cast<size_t>(c.ksize);
      const uint8_t* window = src + c.first[static_cast<size_t>(i)] * in_tap;
      int32_t sum = 1 << (kPrecisionBits - 1);
      for (int x = 0; x < c.count[static_cast<size_t>(i)]; ++x) sum += window[x * in_tap] * w[x];
      dst[i * out_tap] = clip8(sum);
    }
  }
}

}  // namespace

Shape resized_shape(int64_t height, int64_t width, int64_t size) {
  KILN_CHECK(size > 0 && height > 0 && width > 0, ValueError,
             "resize: expected a positive size and image, got size {} for {}x{}", size, height,
             width);
  const int64_t shorter = std::min(height, width), longer = std::max(height, width);
  // Python's int(size * long / short): an exact product, a correctly rounded quotient, truncated.
  const auto other =
      static_cast<int64_t>(static_cast<double>(size * longer) / static_cast<double>(shorter));
  return height <= width ? Shape{size, other} : Shape{other, size};
}

Tensor resize(const Tensor& image, const Shape& size_hw) {
  KILN_CHECK(image.defined() && image.dim() == 3, ShapeError,
             "resize: expected a CHW image with 3 dims, got shape {}",
             image.defined() ? shape_str(image.shape()) : "(undefined)");
  KILN_CHECK(image.dtype() == DType::u8, DTypeError,
             "resize: expected a u8 image (resize before to_float, as torchvision resizes PIL "
             "images before ToTensor), got {}",
             dtype_name(image.dtype()));
  KILN_CHECK(size_hw.size() == 2 && size_hw[0] > 0 && size_hw[1] > 0, ValueError,
             "resize: expected a positive size {{height, width}}, got {}", shape_str(size_hw));
  const int64_t channels = image.size(0), in_h = image.size(1), in_w = image.size(2);
  KILN_CHECK(in_h > 0 && in_w > 0, ShapeError, "resize: expected a non-empty image, got shape {}",
             shape_str(image.shape()));
  const int64_t out_h = size_hw[0], out_w = size_hw[1];
  Tensor src = image.detach().cpu().contiguous();
  if (out_h == in_h && out_w == in_w) return src.clone();
  const Coefficients horizontal = coefficients(static_cast<int>(in_w), static_cast<int>(out_w));
  const Coefficients vertical = coefficients(static_cast<int>(in_h), static_cast<int>(out_h));
  // The input rows the vertical pass reads; the horizontal pass resamples only those.
  const int first_row = vertical.first.front();
  const int last_row = vertical.first.back() + vertical.count.back();
  Tensor out = empty({channels, out_h, out_w}, DType::u8);
  std::vector<uint8_t> temp;
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* plane = src.data<uint8_t>() + c * in_h * in_w;
    uint8_t* dst = out.data<uint8_t>() + c * out_h * out_w;
    int64_t row_length = in_w;
    int row_offset = 0;
    if (out_w != in_w) {
      temp.resize(static_cast<size_t>((last_row - first_row) * out_w));
      resample(plane + first_row * in_w, temp.data(), last_row - first_row, horizontal,
               static_cast<int>(out_w), 1, in_w, 1, out_w);
      plane = temp.data();
      row_length = out_w;
      row_offset = first_row;
    }
    if (out_h != in_h) {
      // Columns are the lines now; the window starts are relative to the rows kept above.
      Coefficients shifted = vertical;
      for (int& f : shifted.first) f -= row_offset;
      resample(plane, dst, static_cast<int>(out_w), shifted, static_cast<int>(out_h), row_length, 1,
               out_w, 1);
    } else {
      std::memcpy(dst, plane, static_cast<size_t>(out_h * out_w));
    }
  }
  return out;
}

}  // namespace kiln::data::functional
