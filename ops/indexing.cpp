// Tensor::index and Tensor::index_put_ (core/tensor_index.h), composed of views and of the
// differentiable index ops, so both work on every device and have gradients: integers select,
// slices slice, None unsqueezes; index tensors (integer, or bool masks turned into their nonzero
// positions) broadcast together and gather through one index_select over the indexed dims,
// flattened, whose result dims go where NumPy's rule puts them: at the first indexed dim when the
// index tensors are adjacent, else in front.
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/profiler.h"
#include "kiln/core/tensor_index.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"
#include "kiln/ops/nonzero.h"
#include "kiln/ops/rearrange.h"

namespace kiln {

namespace indexing {

std::string TensorIndex::str() const {
  auto bound = [](const std::optional<int64_t>& b) { return b ? std::to_string(*b) : ""; };
  switch (kind_) {
    case Kind::integer:
      return std::to_string(integer_);
    case Kind::slice:
      return slice_.step
                 ? fmt::format("{}:{}:{}", bound(slice_.start), bound(slice_.stop), *slice_.step)
                 : fmt::format("{}:{}", bound(slice_.start), bound(slice_.stop));
    case Kind::none:
      return "None";
    case Kind::ellipsis:
      return "...";
    case Kind::tensor:
      return fmt::format("tensor({} {})", dtype_name(tensor_.dtype()), shape_str(tensor_.shape()));
  }
  return "?";
}

}  // namespace indexing

namespace {

using indexing::TensorIndex;
using Kind = TensorIndex::Kind;

std::string describe_indices(const std::vector<TensorIndex>& indices) {
  std::string out = "[";
  for (size_t i = 0; i < indices.size(); ++i) {
    if (i > 0) out += ", ";
    out += indices[i].str();
  }
  return out + "]";
}

// How many dims of the tensor an entry consumes.
int64_t consumed(const TensorIndex& index) {
  switch (index.kind()) {
    case Kind::integer:
    case Kind::slice:
      return 1;
    case Kind::tensor:
      return index.tensor().dtype() == DType::boolean ? index.tensor().dim() : 1;
    default:
      return 0;
  }
}

// An advanced index: i64 positions into the dim it indexes (of the basic-indexed view).
struct Advanced {
  int64_t dim;
  Tensor positions;
};

struct Basic {
  Tensor view;
  std::vector<Advanced> advanced;
};

// Python's slice bounds: negatives count from the end, and both clamp to [0, size].
int64_t clamp_bound(int64_t b, int64_t size) {
  if (b < 0) b += size;
  return b < 0 ? 0 : (b > size ? size : b);
}

// The basic part (integers, slices, None, Ellipsis) as views; the index tensors collected.
Basic apply_basic(const char* op, const Tensor& x, const std::vector<TensorIndex>& indices) {
  int64_t used = 0, ellipses = 0;
  for (const TensorIndex& index : indices) {
    used += consumed(index);
    if (index.kind() == Kind::ellipsis) ++ellipses;
    if (index.kind() == Kind::tensor) {
      const Tensor& t = index.tensor();
      KILN_CHECK(t.defined(), ValueError, "{}: an undefined index tensor in {}", op,
                 describe_indices(indices));
      KILN_CHECK(t.dtype() == DType::boolean || t.dtype() == DType::i64 || t.dtype() == DType::i32,
                 DTypeError, "{}: index tensors must be bool, i64 or i32, got {} in {}", op,
                 dtype_name(t.dtype()), describe_indices(indices));
      KILN_CHECK(t.dtype() != DType::boolean || t.dim() > 0, NotImplementedError,
                 "{}: a 0-dim bool index is not supported ({}); unsqueeze instead", op,
                 describe_indices(indices));
    }
  }
  KILN_CHECK(ellipses <= 1, IndexError, "{}: at most one Ellipsis, got {} in {}", op, ellipses,
             describe_indices(indices));
  KILN_CHECK(used <= x.dim(), IndexError,
             "{}: too many indices for a tensor of dimension {}: {} index {} dims", op, x.dim(),
             describe_indices(indices), used);
  Basic out{x, {}};
  int64_t d = 0;  // the dim of out.view the next entry applies to
  for (const TensorIndex& index : indices) {
    switch (index.kind()) {
      case Kind::integer: {
        const int64_t size = out.view.size(d);
        int64_t i = index.integer();
        KILN_CHECK(i >= -size && i < size, IndexError,
                   "{}: index {} is out of bounds for a dim of size {} (in {} of a tensor of "
                   "shape {})",
                   op, i, size, describe_indices(indices), shape_str(x.shape()));
        out.view = out.view.select(d, i < 0 ? i + size : i);
        break;
      }
      case Kind::slice: {
        const indexing::Slice& s = index.slice();
        const int64_t step = s.step.value_or(1);
        KILN_CHECK(step > 0, ValueError, "{}: slice step must be positive, got {} (in {})", op,
                   step, describe_indices(indices));
        const int64_t size = out.view.size(d);
        const int64_t start = s.start ? clamp_bound(*s.start, size) : 0;
        const int64_t stop = s.stop ? clamp_bound(*s.stop, size) : size;
        out.view = out.view.slice(d, start, stop < start ? start : stop, step);
        ++d;
        break;
      }
      case Kind::none:
        out.view = out.view.unsqueeze(d);
        ++d;
        break;
      case Kind::ellipsis:
        d += x.dim() - used;
        break;
      case Kind::tensor: {
        const Tensor t = index.tensor().to(out.view.device());
        if (t.dtype() == DType::boolean) {
          const Shape covered(out.view.shape().begin() + d, out.view.shape().begin() + d + t.dim());
          KILN_CHECK(covered == t.shape(), IndexError,
                     "{}: a bool mask of shape {} indexes dims of shape {} (in {} of a tensor of "
                     "shape {})",
                     op, shape_str(t.shape()), shape_str(covered), describe_indices(indices),
                     shape_str(x.shape()));
          const Tensor chosen = nonzero(t);  // [M, mask dims]
          for (int64_t k = 0; k < t.dim(); ++k)
            out.advanced.push_back({d + k, chosen.select(1, k)});
          d += t.dim();
        } else {
          const int64_t size = out.view.size(d);
          Tensor positions = t.to(DType::i64);
          if (positions.numel() > 0) {
            const bool in_range =
                !any(logical_or(lt(positions, -size), ge(positions, size))).item<bool>();
            KILN_CHECK(in_range, IndexError,
                       "{}: an index tensor holds a position out of bounds for a dim of size {} "
                       "(in {} of a tensor of shape {})",
                       op, size, describe_indices(indices), shape_str(x.shape()));
            positions =
                where(lt(positions, 0), add(positions, static_cast<double>(size)), positions);
          }
          out.advanced.push_back({d, positions});
          ++d;
        }
        break;
      }
    }
  }
  return out;
}

}  // namespace

Tensor Tensor::index(const std::vector<indexing::TensorIndex>& indices) const {
  const char* op = "index";
  profiler::OpScope profile(op, {this});
  KILN_CHECK(defined(), ValueError, "index: use of an undefined tensor");
  Basic basic = apply_basic(op, *this, indices);
  if (basic.advanced.empty()) return basic.view;
  const Tensor& y = basic.view;
  // The index tensors broadcast together.
  Shape broadcast = basic.advanced[0].positions.shape();
  for (const Advanced& a : basic.advanced)
    broadcast = broadcast_shapes(op, broadcast, a.positions.shape());
  // The indexed dims in front, flattened into one: the row-major position within them.
  std::vector<int64_t> order;
  std::vector<bool> indexed(y.dim(), false);
  bool adjacent = true;
  for (size_t k = 0; k < basic.advanced.size(); ++k) {
    const int64_t dim = basic.advanced[k].dim;
    KILN_CHECK(!indexed[dim], IndexError, "{}: dim {} is indexed twice in {}", op, dim,
               describe_indices(indices));
    indexed[dim] = true;
    order.push_back(dim);
    if (k > 0 && dim != basic.advanced[k - 1].dim + 1) adjacent = false;
  }
  Shape rest;
  for (int64_t d = 0; d < y.dim(); ++d) {
    if (indexed[d]) continue;
    order.push_back(d);
    rest.push_back(y.size(d));
  }
  Tensor linear = zeros(broadcast, DType::i64, y.device());
  int64_t indexed_numel = 1;
  for (const Advanced& a : basic.advanced) {
    linear = add(mul(linear, static_cast<double>(y.size(a.dim))), a.positions.expand(broadcast));
    indexed_numel *= y.size(a.dim);
  }
  Shape flat_shape{indexed_numel};
  flat_shape.insert(flat_shape.end(), rest.begin(), rest.end());
  const Tensor flat = y.permute(order).reshape(flat_shape);
  Shape out_shape = broadcast;
  out_shape.insert(out_shape.end(), rest.begin(), rest.end());
  Tensor out = index_select(flat, 0, linear.reshape({-1})).reshape(out_shape);
  const int64_t first = basic.advanced[0].dim;
  if (!adjacent || first == 0) return out;
  // NumPy's rule: adjacent index tensors leave their result dims where the first one was.
  const int64_t b = static_cast<int64_t>(broadcast.size());
  std::vector<int64_t> back;
  for (int64_t d = 0; d < first; ++d) back.push_back(b + d);
  for (int64_t d = 0; d < b; ++d) back.push_back(d);
  for (int64_t d = b + first; d < out.dim(); ++d) back.push_back(d);
  return out.permute(back);
}

Tensor& Tensor::index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                           bool accumulate) {
  const char* op = "index_put_";
  profiler::OpScope profile(op, {this, &values});
  KILN_CHECK(defined(), ValueError, "index_put_: use of an undefined tensor");
  KILN_CHECK(values.defined(), ValueError, "index_put_: the values are an undefined tensor");
  // The row-major positions of the elements the indices name, by the same rules as index().
  const Tensor positions = arange(numel(), DType::i64, device()).view(shape()).index(indices);
  const Shape target = positions.shape();
  bool broadcasts = values.dim() <= static_cast<int64_t>(target.size());
  for (int64_t k = 1; broadcasts && k <= values.dim(); ++k) {
    const int64_t v = values.size(-k), t = target[target.size() - k];
    broadcasts = v == 1 || v == t;
  }
  KILN_CHECK(broadcasts, ShapeError,
             "index_put_: values of shape {} do not broadcast to the indexed shape {} (indices "
             "{})",
             shape_str(values.shape()), shape_str(target), describe_indices(indices));
  const Tensor flat_positions = positions.reshape({-1});
  if (!accumulate && flat_positions.numel() > 1) {
    const int64_t distinct = unique(flat_positions).values.numel();
    KILN_CHECK(distinct == flat_positions.numel(), ValueError,
               "index_put_: the indices {} name {} elements but only {} distinct ones; which "
               "value lands is undefined (PyTorch leaves it so); pass accumulate=true to add them",
               describe_indices(indices), flat_positions.numel(), distinct);
  }
  const Tensor flat_values = values.to(dtype()).expand(target).reshape({-1});
  const Tensor base = reshape({-1});
  const Tensor added = index_add(zeros_like(base), 0, flat_positions, flat_values);
  Tensor updated;
  if (accumulate) {
    updated = add(base, added);
  } else {
    const Tensor hit = index_add(zeros({numel()}, DType::f32, device()), 0, flat_positions,
                                 ones({flat_positions.numel()}, DType::f32, device()));
    updated = where(gt(hit, 0.0), added, base);
  }
  return copy_(updated.view(shape()));
}

Tensor& Tensor::index_put_(const std::vector<indexing::TensorIndex>& indices, double value) {
  return index_put_(indices, scalar_tensor(value, dtype(), device()));
}

}  // namespace kiln
