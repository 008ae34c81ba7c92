// Views: new shape and strides over the same storage, never a copy. Each records a backward node
// that maps the view's gradient back to the base's shape.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"

namespace kiln {

namespace {

Tensor alias_with(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  Tensor out =
      make_tensor(base.storage(), std::move(shape), std::move(strides), offset, base.dtype());
  out.impl()->is_view = true;
  return out;
}

struct ReshapeBackward : Node {
  bool differentiable_backward() const override { return true; }
  Shape input_shape;
  std::string name() const override { return "ReshapeBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override { return {grad.reshape(input_shape)}; }
};

struct PermuteBackward : Node {
  bool differentiable_backward() const override { return true; }
  std::vector<int64_t> inverse;
  std::string name() const override { return "PermuteBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override { return {grad.permute(inverse)}; }
};

// Where a slice, narrow or select took its view from.
struct Window {
  Shape input_shape;
  int64_t dim = 0, start = 0, end = 0, step = 1;
  bool is_select = false;
  Tensor of(const Tensor& base) const {
    return is_select ? base.select(dim, start) : base.slice(dim, start, end, step);
  }
};

// The backward of a slice's backward (create_graph): placing a gradient in zeros is linear, and
// its adjoint is taking the same window again.
struct WindowBackward : Node {
  Window window;
  std::string name() const override { return "SliceBackwardBackward"; }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& grad) override { return {window.of(grad)}; }
};

// Slice, narrow and select: the gradient lands in a zero tensor of the base's shape.
struct SliceBackward : Node {
  Window window;
  std::string name() const override {
    return window.is_select ? "SelectBackward" : "SliceBackward";
  }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& grad) override {
    Tensor out;
    {
      NoGradGuard placing;
      out = zeros(window.input_shape, grad.dtype(), grad.device());
      window.of(out).copy_(grad);
    }
    if (should_record({&grad})) {
      auto node = std::make_shared<WindowBackward>();
      node->window = window;
      record(out, node, {&grad});
    }
    return {out};
  }
};

struct ExpandBackward : Node {
  bool differentiable_backward() const override { return true; }
  Shape input_shape;
  std::string name() const override { return "ExpandBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override { return {sum_to(grad, input_shape)}; }
};

void record_reshape(Tensor& out, const Tensor& in) {
  if (!should_record({&in})) return;
  auto node = std::make_shared<ReshapeBackward>();
  node->input_shape = in.shape();
  record(out, node, {&in});
}

// The strides for viewing a tensor of (shape, strides) as new_shape without copying, or empty if
// impossible. Each run of merged old dims must be contiguous within itself.
std::optional<Shape> view_strides(const Shape& shape, const Shape& strides,
                                  const Shape& new_shape) {
  Shape new_strides(new_shape.size());
  if (shape_numel(shape) == 0 || shape.empty()) return contiguous_strides(new_shape);
  size_t old_d = 0, new_d = 0;
  const size_t old_n = shape.size(), new_n = new_shape.size();
  while (old_d < old_n || new_d < new_n) {
    // Skip size-1 dims: their strides are free.
    if (old_d < old_n && shape[old_d] == 1) {
      ++old_d;
      continue;
    }
    if (new_d < new_n && new_shape[new_d] == 1) {
      new_strides[new_d] = 1;
      ++new_d;
      continue;
    }
    if (old_d >= old_n || new_d >= new_n) return std::nullopt;
    // Gather old dims until their product matches the new dims' product.
    size_t old_begin = old_d, new_begin = new_d;
    int64_t old_size = shape[old_d++], new_size = new_shape[new_d++];
    while (old_size != new_size) {
      if (old_size < new_size) {
        if (old_d >= old_n) return std::nullopt;
        if (shape[old_d] == 1) {
          ++old_d;
          continue;
        }
        old_size *= shape[old_d++];
      } else {
        if (new_d >= new_n) return std::nullopt;
        new_size *= new_shape[new_d++];
      }
    }
    for (size_t d = old_begin; d + 1 < old_d; ++d) {
      if (shape[d] == 1) continue;
      size_t next = d + 1;
      while (next < old_d && shape[next] == 1) ++next;
      if (next < old_d && strides[d] != strides[next] * shape[next]) return std::nullopt;
    }
    size_t last = old_d - 1;
    while (shape[last] == 1 && last > old_begin) --last;
    int64_t running = strides[last];
    for (size_t d = new_d; d-- > new_begin;) {
      new_strides[d] = running;
      running *= new_shape[d];
    }
  }
  return new_strides;
}

// Resolves one -1 in a requested shape from the element count.
Shape infer_shape(const char* op, const Shape& requested, int64_t numel, const Shape& from) {
  Shape out = requested;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer < 0, ShapeError, "{}: only one dim may be -1, got {}", op,
                 shape_str(requested));
      infer = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(out[i] >= 0, ValueError, "{}: negative size in {}", op, shape_str(requested));
      known = checked_mul(op, "the product of the requested sizes", known, out[i]);
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, ShapeError,
               "{}: shape {} is invalid for input of shape {} ({} elements)", op,
               shape_str(requested), shape_str(from), numel);
    out[infer] = numel / known;
  }
  KILN_CHECK(shape_numel(out, op) == numel, ShapeError,
             "{}: shape {} is invalid for input of shape {} ({} elements)", op,
             shape_str(requested), shape_str(from), numel);
  return out;
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  Shape new_shape = infer_shape("view", requested, numel(), shape());
  std::optional<Shape> new_strides = view_strides(shape(), strides(), new_shape);
  KILN_CHECK(new_strides.has_value(), ShapeError,
             "view: cannot view a tensor of shape {} and strides {} as {} without copying; use "
             "reshape() or call contiguous() first",
             shape_str(shape()), shape_str(strides()), shape_str(new_shape));
  Tensor out = alias_with(*this, new_shape, *new_strides, offset());
  record_reshape(out, *this);
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  Shape new_shape = infer_shape("reshape", requested, numel(), shape());
  if (view_strides(shape(), strides(), new_shape).has_value()) return view(new_shape);
  return clone(MemoryFormat::contiguous).view(new_shape);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  KILN_CHECK(static_cast<int64_t>(dims.size()) == dim(), ShapeError,
             "permute: got {} dims for a tensor of {} dims (shape {})", dims.size(), dim(),
             shape_str(shape()));
  Shape new_shape(dims.size()), new_strides(dims.size());
  std::vector<int64_t> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim("permute", dims[i], dim());
    KILN_CHECK(inverse[d] < 0, IndexError, "permute: dim {} repeated in {}", d, shape_str(dims));
    inverse[d] = static_cast<int64_t>(i);
    new_shape[i] = shape()[d];
    new_strides[i] = strides()[d];
  }
  Tensor out = alias_with(*this, new_shape, new_strides, offset());
  if (should_record({this})) {
    auto node = std::make_shared<PermuteBackward>();
    node->inverse = inverse;
    record(out, node, {this});
  }
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  std::vector<int64_t> order(dim());
  std::iota(order.begin(), order.end(), 0);
  if (dim() == 0) return permute(order);
  std::swap(order[wrap_dim("transpose", dim0, dim())], order[wrap_dim("transpose", dim1, dim())]);
  return permute(order);
}

Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, ShapeError, "t: expected a tensor of at most 2 dims, got shape {}",
             shape_str(shape()));
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  KILN_CHECK(dim() > 0, ShapeError, "slice: cannot slice a 0-dim tensor");
  d = wrap_dim("slice", d, dim());
  KILN_CHECK(step > 0, ValueError, "slice: step must be positive, got {}", step);
  const int64_t n = shape()[d];
  // Python slicing: negative bounds count from the end, out-of-range bounds clamp.
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape new_shape = shape(), new_strides = strides();
  new_shape[d] = (end - start + step - 1) / step;
  new_strides[d] *= step;
  Tensor out = alias_with(*this, new_shape, new_strides, offset() + start * strides()[d]);
  if (should_record({this})) {
    auto node = std::make_shared<SliceBackward>();
    node->window = {shape(), d, start, end, step, false};
    record(out, node, {this});
  }
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  KILN_CHECK(dim() > 0, ShapeError, "narrow: cannot narrow a 0-dim tensor");
  d = wrap_dim("narrow", d, dim());
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  KILN_CHECK(start >= 0 && length >= 0 && start + length <= n, IndexError,
             "narrow: start {} and length {} out of range for dim {} of size {}", start, length, d,
             n);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  KILN_CHECK(dim() > 0, ShapeError, "select: cannot select from a 0-dim tensor");
  d = wrap_dim("select", d, dim());
  const int64_t n = shape()[d];
  KILN_CHECK(index >= -n && index < n, IndexError,
             "select: index {} out of range for dim {} of size {} (shape {})", index, d, n,
             shape_str(shape()));
  if (index < 0) index += n;
  Shape new_shape = shape(), new_strides = strides();
  new_shape.erase(new_shape.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  Tensor out = alias_with(*this, new_shape, new_strides, offset() + index * strides()[d]);
  if (should_record({this})) {
    auto node = std::make_shared<SliceBackward>();
    node->window = {shape(), d, index, index + 1, 1, true};
    record(out, node, {this});
  }
  return out;
}

Tensor Tensor::expand(const Shape& requested) const {
  KILN_CHECK(requested.size() >= shape().size(), ShapeError,
             "expand: target {} has fewer dims than the tensor's shape {}", shape_str(requested),
             shape_str(shape()));
  const size_t lead = requested.size() - shape().size();
  Shape new_shape(requested.size()), new_strides(requested.size());
  for (size_t i = 0; i < requested.size(); ++i) {
    if (i < lead) {
      KILN_CHECK(requested[i] >= 0, ShapeError,
                 "expand: size -1 not allowed in a new leading dim ({})", shape_str(requested));
      new_shape[i] = requested[i];
      new_strides[i] = 0;
      continue;
    }
    int64_t have = shape()[i - lead];
    int64_t want = requested[i] == -1 ? have : requested[i];
    KILN_CHECK(have == want || have == 1, ShapeError,
               "expand: cannot expand shape {} to {} (dim {}: {} vs {}); only size-1 dims expand",
               shape_str(shape()), shape_str(requested), i, have, want);
    new_shape[i] = want;
    new_strides[i] = have == want ? strides()[i - lead] : 0;
  }
  shape_numel(new_shape, "expand");
  Tensor out = alias_with(*this, new_shape, new_strides, offset());
  if (should_record({this})) {
    auto node = std::make_shared<ExpandBackward>();
    node->input_shape = shape();
    record(out, node, {this});
  }
  return out;
}

Tensor Tensor::expand_as(const Tensor& other) const {
  return expand(other.shape());
}

Tensor Tensor::squeeze() const {
  Shape new_shape;
  for (int64_t s : shape())
    if (s != 1) new_shape.push_back(s);
  return view(new_shape);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return view({});
  d = wrap_dim("squeeze", d, dim());
  if (shape()[d] != 1) return view(shape());
  Shape new_shape = shape();
  new_shape.erase(new_shape.begin() + d);
  return view(new_shape);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim("unsqueeze", d, dim() + 1);
  Shape new_shape = shape();
  new_shape.insert(new_shape.begin() + d, 1);
  return view(new_shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim("flatten", start_dim, dim());
  end_dim = wrap_dim("flatten", end_dim, dim());
  KILN_CHECK(start_dim <= end_dim, ValueError, "flatten: start_dim {} is after end_dim {}",
             start_dim, end_dim);
  Shape new_shape(shape().begin(), shape().begin() + start_dim);
  int64_t merged = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) merged *= shape()[d];
  new_shape.push_back(merged);
  new_shape.insert(new_shape.end(), shape().begin() + end_dim + 1, shape().end());
  return reshape(new_shape);
}

Tensor Tensor::as_strided(const Shape& new_shape, const Shape& new_strides,
                          int64_t new_offset) const {
  KILN_CHECK(new_shape.size() == new_strides.size(), ShapeError,
             "as_strided: shape {} and strides {} differ in length", shape_str(new_shape),
             shape_str(new_strides));
  KILN_CHECK(!should_record({this}), AutogradError,
             "as_strided: not differentiable; detach() the tensor first");
  int64_t last = new_offset;
  for (size_t i = 0; i < new_shape.size(); ++i) {
    KILN_CHECK(new_shape[i] >= 0 && new_strides[i] >= 0, ValueError,
               "as_strided: negative size or stride in {} / {}", shape_str(new_shape),
               shape_str(new_strides));
    if (new_shape[i] == 0) {
      last = new_offset - 1;
    } else {
      const int64_t reach =
          checked_mul("as_strided", "the view's reach", new_shape[i] - 1, new_strides[i]);
      KILN_CHECK(!__builtin_add_overflow(last, reach, &last), ShapeError,
                 "as_strided: shape {} and strides {} reach past int64", shape_str(new_shape),
                 shape_str(new_strides));
    }
  }
  int64_t capacity = static_cast<int64_t>(storage()->nbytes() / element_size());
  KILN_CHECK(new_offset >= 0 && last < capacity, IndexError,
             "as_strided: view reaches element {} of a storage of {} elements", last, capacity);
  return alias_with(*this, new_shape, new_strides, new_offset);
}

}  // namespace kiln
