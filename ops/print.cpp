// Tensor::str(): PyTorch's layout (nested brackets, aligned columns, "..." past 1000 elements)
// followed by the shape, dtype and device, which PyTorch leaves out and a C++ user cannot inspect
// as easily.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/autograd/record.h"

namespace kiln {

namespace {

constexpr int64_t kElideAbove = 1000;  // elements, as torch's print threshold
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating = false, boolean = false, scientific = false, integral_floats = true;
  size_t width = 1;

  std::string format(double v) const {
    if (boolean) return v != 0 ? "True" : "False";
    if (!floating) return fmt::format("{}", static_cast<int64_t>(v));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (scientific) return fmt::format("{:.4e}", v);
    if (integral_floats) return fmt::format("{:.0f}.", v);
    return fmt::format("{:.4f}", v);
  }
};

void print_recursive(std::ostringstream& os, const std::vector<double>& values, const Shape& shape,
                     const Shape& strides, size_t d, int64_t base, bool elide, const Formatter& f,
                     int indent) {
  if (d == shape.size()) {
    std::string s = f.format(values[base]);
    os << std::string(f.width - std::min(f.width, s.size()), ' ') << s;
    return;
  }
  os << '[';
  const int64_t n = shape[d];
  for (int64_t i = 0; i < n; ++i) {
    if (elide && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (d + 1 == shape.size() ? "..., " : "...,\n" + std::string(indent + d + 1, ' '));
      i = n - kEdgeItems;
    }
    print_recursive(os, values, shape, strides, d + 1, base + i * strides[d], elide, f, indent);
    if (i + 1 < n) {
      if (d + 1 == shape.size()) {
        os << ", ";
      } else {
        os << ',' << std::string(shape.size() - d - 1, '\n') << std::string(indent + d + 1, ' ');
      }
    }
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> values = tolist();
  Formatter f;
  f.floating = is_floating(dtype());
  f.boolean = dtype() == DType::boolean;
  double max_abs = 0, min_abs = INFINITY;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    max_abs = std::max(max_abs, std::abs(v));
    if (v != 0) min_abs = std::min(min_abs, std::abs(v));
    if (std::floor(v) != v) f.integral_floats = false;
  }
  f.scientific =
      f.floating && (max_abs >= 1e8 || (min_abs < 1e-4 && !f.integral_floats) ||
                     (max_abs / min_abs > 1e3 && std::isfinite(min_abs) && !f.integral_floats));
  for (double v : values) f.width = std::max(f.width, f.format(v).size());

  std::ostringstream os;
  os << "tensor(";
  const bool elide = numel() > kElideAbove;
  if (dim() == 0) {
    os << f.format(values[0]);
  } else {
    print_recursive(os, values, shape(), contiguous_strides(shape()), 0, 0, elide, f, 7);
  }
  os << ", shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype())
     << ", device=" << device().str();
  if (grad_fn())
    os << ", grad_fn=<" << grad_fn()->name() << ">";
  else if (requires_grad())
    os << ", requires_grad=true";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) {
  return out << t.str();
}

}  // namespace kiln
