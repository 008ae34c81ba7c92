// interpolate: each output pixel's source positions and weights per axis, computed as PyTorch's
// CPU kernels compute them (upsample_nearest2d, upsample_bilinear2d: in float for float inputs, in
// double for double), then gathered with index_select and blended along W, then along H.
#include "kiln/ops/interpolate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/shape.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"

namespace kiln {

namespace {

// One axis of the resize: the two source indices of each output position and their weights.
struct Axis {
  std::vector<int64_t> first, second;
  std::vector<double> first_weight, second_weight;
};

// PyTorch's compute_scales_value: 1 / scale_factor when given, else in / out.
template <class A>
A scale_of(int64_t in, int64_t out, std::optional<double> factor) {
  return factor ? static_cast<A>(1.0 / *factor) : static_cast<A>(in) / static_cast<A>(out);
}

template <class A>
Axis nearest_axis(int64_t in, int64_t out, std::optional<double> factor) {
  Axis a;
  const A scale = scale_of<A>(in, out, factor);
  for (int64_t o = 0; o < out; ++o) {
    int64_t i = o;
    if (out == 2 * in)
      i = o >> 1;
    else if (out != in)
      i = std::min(static_cast<int64_t>(std::floor(static_cast<A>(o) * scale)), in - 1);
    a.first.push_back(i);
  }
  return a;
}

template <class A>
Axis bilinear_axis(int64_t in, int64_t out, std::optional<double> factor, bool align_corners) {
  Axis a;
  const A scale = align_corners
                      ? (out > 1 ? static_cast<A>(in - 1) / static_cast<A>(out - 1) : A(0))
                      : scale_of<A>(in, out, factor);
  for (int64_t o = 0; o < out; ++o) {
    if (out == in) {
      a.first.push_back(o);
      a.second.push_back(o);
      a.first_weight.push_back(1.0);
      a.second_weight.push_back(0.0);
      continue;
    }
    const A source = align_corners ? scale * static_cast<A>(o)
                                   : std::max(scale * (static_cast<A>(o) + A(0.5)) - A(0.5), A(0));
    const int64_t i0 = static_cast<int64_t>(source);
    const A lambda1 = std::min(std::max(source - static_cast<A>(i0), A(0)), A(1));
    a.first.push_back(i0);
    a.second.push_back(i0 + (i0 < in - 1 ? 1 : 0));
    a.first_weight.push_back(static_cast<double>(A(1) - lambda1));
    a.second_weight.push_back(static_cast<double>(lambda1));
  }
  return a;
}

Tensor index_tensor(const std::vector<int64_t>& index, Device device) {
  return tensor(index, {static_cast<int64_t>(index.size())}).to(device);
}

// The weights along dim of a 4-D tensor, shaped to broadcast there.
Tensor weights(const std::vector<double>& w, int64_t dim, DType dtype, Device device) {
  Shape shape{1, 1, 1, 1};
  shape[dim] = static_cast<int64_t>(w.size());
  return tensor(w, shape).to(dtype).to(device);
}

Tensor resize_axis(const Tensor& x, int64_t dim, const Axis& a, InterpolateMode mode) {
  const Tensor first = index_select(x, dim, index_tensor(a.first, x.device()));
  if (mode == InterpolateMode::nearest) return first;
  const Tensor second = index_select(x, dim, index_tensor(a.second, x.device()));
  return add(mul(first, weights(a.first_weight, dim, x.dtype(), x.device())),
             mul(second, weights(a.second_weight, dim, x.dtype(), x.device())));
}

const char* mode_name(InterpolateMode mode) {
  return mode == InterpolateMode::nearest ? "nearest" : "bilinear";
}

}  // namespace

InterpolateMode interpolate_mode(const std::string& name) {
  if (name == "nearest") return InterpolateMode::nearest;
  if (name == "bilinear") return InterpolateMode::bilinear;
  throw ValueError("interpolate: expected mode \"nearest\" or \"bilinear\", got \"" + name + "\"");
}

Tensor interpolate(const Tensor& x, const InterpolateOptions& options) {
  const char* op = "interpolate";
  KILN_CHECK(x.defined() && x.dim() == 4, ShapeError,
             "{}: expected a 4-D input [N, C, H, W], got {}", op, describe(x));
  KILN_CHECK(is_floating(x.dtype()), DTypeError, "{}: expected a floating input, got {}", op,
             describe(x));
  KILN_CHECK(options.size.has_value() != options.scale_factor.has_value(), ValueError,
             "{}: give either size or scale_factor, not both or neither", op);
  KILN_CHECK(!options.align_corners || options.mode == InterpolateMode::bilinear, ValueError,
             "{}: align_corners applies to bilinear only, got mode {}", op,
             mode_name(options.mode));
  std::array<int64_t, 2> out{};
  std::array<std::optional<double>, 2> factor{};
  for (int k = 0; k < 2; ++k) {
    const int64_t in = x.size(2 + k);
    if (options.size) {
      out[k] = (*options.size)[k];
    } else {
      factor[k] = (*options.scale_factor)[k];
      KILN_CHECK(*factor[k] > 0, ValueError, "{}: scale_factor must be positive, got {}", op,
                 *factor[k]);
      out[k] = static_cast<int64_t>(std::floor(static_cast<double>(in) * *factor[k]));
    }
    KILN_CHECK(out[k] > 0 && in > 0, ValueError,
               "{}: input and output sizes must be positive, got {} from {} in dim {}", op, out[k],
               in, 2 + k);
  }
  // The 16-bit floats blend in f32, as PyTorch's kernels compute in their opmath type.
  const DType compute = dtype_size(x.dtype()) == 2 ? DType::f32 : x.dtype();
  Tensor y = x.to(compute);
  for (int k = 1; k >= 0; --k) {  // W, then H: PyTorch's order of the blends
    const int64_t in = x.size(2 + k);
    const bool f64 = compute == DType::f64;
    const Axis a = options.mode == InterpolateMode::nearest
                       ? (f64 ? nearest_axis<double>(in, out[k], factor[k])
                              : nearest_axis<float>(in, out[k], factor[k]))
                       : (f64 ? bilinear_axis<double>(in, out[k], factor[k], options.align_corners)
                              : bilinear_axis<float>(in, out[k], factor[k], options.align_corners));
    y = resize_axis(y, 2 + k, a, options.mode);
  }
  return y.to(x.dtype());
}

}  // namespace kiln
