// Shape arithmetic shared by every op: element counts, contiguous strides, dimension wrapping and
// broadcasting, each with an error that names the op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;

// The number of elements of `shape`. Throws ShapeError naming `op` when the product of the sizes
// does not fit in int64, so that no tensor can claim fewer elements than it spans.
int64_t shape_numel(const Shape& shape, const char* op = "shape_numel");
// a * b for two non-negative sizes; throws ShapeError naming `op` and `what` on overflow.
int64_t checked_mul(const char* op, const char* what, int64_t a, int64_t b);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"

// Wraps a possibly negative dim into [0, ndim); throws IndexError naming `op` when out of range.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);
// NumPy broadcasting of two shapes; throws ShapeError naming `op` and the first dim that clashes.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
// Throws ValueError if any size is negative.
void check_shape(const char* op, const Shape& shape);

}  // namespace kiln
