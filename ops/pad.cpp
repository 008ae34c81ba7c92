#include "kiln/ops/pad.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/shape.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"
#include "kiln/ops/rearrange.h"

namespace kiln {

namespace {

const char* mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::constant:
      return "constant";
    case PadMode::reflect:
      return "reflect";
    case PadMode::replicate:
      return "replicate";
    case PadMode::circular:
      return "circular";
  }
  return "?";
}

// x with `before` and `after` elements of value added along dim (negative amounts crop).
Tensor pad_constant(const Tensor& x, int64_t dim, int64_t before, int64_t after, double value) {
  const int64_t n = x.size(dim);
  Tensor y = x.narrow(dim, before < 0 ? -before : 0,
                      n - (before < 0 ? -before : 0) - (after < 0 ? -after : 0));
  std::vector<Tensor> parts;
  auto filler = [&](int64_t count) {
    Shape shape = y.shape();
    shape[dim] = count;
    return full(shape, value, x.dtype(), x.device());
  };
  if (before > 0) parts.push_back(filler(before));
  parts.push_back(y);
  if (after > 0) parts.push_back(filler(after));
  return parts.size() == 1 ? y : cat(parts, dim);
}

// The `count` elements added before (leading) or after x along dim, made of slices of x (so the
// backward adds each element's gradient in a fixed order, without atomics): reflect mirrors the
// elements next to the edge, replicate repeats the edge, circular takes the other end.
Tensor edge(PadMode mode, const Tensor& x, int64_t dim, int64_t count, bool leading) {
  const int64_t n = x.size(dim);
  switch (mode) {
    case PadMode::reflect:
      return flip(x.narrow(dim, leading ? 1 : n - 1 - count, count), {dim});
    case PadMode::replicate: {
      Shape shape = x.shape();
      shape[dim] = count;
      return x.narrow(dim, leading ? 0 : n - 1, 1).expand(shape);
    }
    default:
      return x.narrow(dim, leading ? n - count : 0, count);
  }
}

}  // namespace

PadMode pad_mode(const std::string& name) {
  for (PadMode m : {PadMode::constant, PadMode::reflect, PadMode::replicate, PadMode::circular})
    if (name == mode_name(m)) return m;
  throw ValueError(
      "pad: expected mode \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"" + name +
      "\"");
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  const char* op = "pad";
  KILN_CHECK(x.defined(), ValueError, "{}: the input is undefined", op);
  KILN_CHECK(pads.size() % 2 == 0 && static_cast<int64_t>(pads.size()) <= 2 * x.dim(), ValueError,
             "{}: expected an even number of amounts, at most two per dim of {}, got {}", op,
             describe(x), pads.size());
  // PyTorch pads the trailing dims and keeps the leading two (batch, channels) for the non-constant
  // modes, which need them.
  KILN_CHECK(mode == PadMode::constant || static_cast<int64_t>(pads.size()) / 2 <= x.dim() - 1,
             ValueError, "{}: {} mode pads at most {} trailing dims of {}, got {} amounts", op,
             mode_name(mode), x.dim() - 1, describe(x), pads.size());
  Tensor y = x;
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    const int64_t dim = x.dim() - 1 - static_cast<int64_t>(k);
    const int64_t before = pads[2 * k], after = pads[2 * k + 1];
    const int64_t n = y.size(dim);
    if (mode == PadMode::constant) {
      KILN_CHECK(n + before + after >= 0, ValueError,
                 "{}: cropping {} and {} from dim {} of size {} leaves nothing", op, -before,
                 -after, dim, n);
      y = pad_constant(y, dim, before, after, value);
      continue;
    }
    KILN_CHECK(before >= 0 && after >= 0, ValueError,
               "{}: {} mode takes non-negative amounts, got {} and {} for dim {}", op,
               mode_name(mode), before, after, dim);
    const int64_t limit = mode == PadMode::reflect ? n - 1 : (mode == PadMode::circular ? n : -1);
    KILN_CHECK(n > 0 && (limit < 0 || (before <= limit && after <= limit)), ValueError,
               "{}: {} padding of dim {} (size {}) must be {} the size, got {} and {}", op,
               mode_name(mode), dim, n, mode == PadMode::reflect ? "smaller than" : "at most",
               before, after);
    if (before == 0 && after == 0) continue;
    y = cat({edge(mode, y, dim, before, true), y, edge(mode, y, dim, after, false)}, dim);
  }
  return y;
}

}  // namespace kiln
