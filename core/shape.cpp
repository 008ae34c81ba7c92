#include "kiln/core/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/core/error.h"

namespace kiln {

int64_t shape_numel(const Shape& shape, const char* op) {
  int64_t n = 1;
  for (int64_t s : shape)
    KILN_CHECK(!__builtin_mul_overflow(n, s, &n), ShapeError,
               "{}: shape {} has more elements than an int64 can count", op, shape_str(shape));
  return n;
}

int64_t checked_mul(const char* op, const char* what, int64_t a, int64_t b) {
  int64_t product = 0;
  KILN_CHECK(!__builtin_mul_overflow(a, b, &product), ShapeError,
             "{}: {} overflows int64 ({} x {})", op, what, a, b);
  return product;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t running = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = running;
    running *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  KILN_CHECK(dim >= lo && dim <= hi, IndexError,
             "{}: dim {} out of range for a tensor of {} dims (expected {} to {})", op, dim, ndim,
             lo, hi);
  if (ndim == 0) return 0;
  return dim < 0 ? dim + ndim : dim;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, ShapeError,
               "{}: shapes {} and {} cannot broadcast (dim {}: {} vs {})", op, shape_str(a),
               shape_str(b), static_cast<int64_t>(i) - static_cast<int64_t>(n), da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

void check_shape(const char* op, const Shape& shape) {
  for (int64_t s : shape)
    KILN_CHECK(s >= 0, ValueError, "{}: negative size in shape {}", op, shape_str(shape));
}

}  // namespace kiln
