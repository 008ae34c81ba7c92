#include "kiln/ops/nonzero.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/core/shape.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"
#include "kiln/ops/rearrange.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sort.h"

namespace kiln {

namespace {

// The flat (row-major) positions of the true elements of a bool tensor, on its device.
Tensor true_positions(const Tensor& mask) {
  const Tensor host = mask.cpu().contiguous();
  const bool* m = host.data<bool>();
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < host.numel(); ++i)
    if (m[i]) positions.push_back(i);
  const int64_t count = static_cast<int64_t>(positions.size());
  return tensor(positions, {count}).to(mask.device());
}

}  // namespace

Tensor nonzero(const Tensor& x) {
  profiler::OpScope profile("nonzero", {&x});
  require_defined("nonzero", x);
  const Tensor flat = true_positions(ne(x.detach(), 0.0));
  const int64_t count = flat.numel();
  // Each position's coordinates, from the last dim: (flat / stride) % size, on the host's copy.
  const Tensor host = flat.cpu();
  std::vector<int64_t> coords(static_cast<size_t>(count * x.dim()));
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = host.data<int64_t>()[i];
    for (int64_t d = x.dim() - 1; d >= 0; --d) {
      coords[static_cast<size_t>(i * x.dim() + d)] = rest % x.size(d);
      rest /= x.size(d);
    }
  }
  return tensor(coords, {count, x.dim()}).to(x.device());
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  profiler::OpScope profile("masked_select", {&x, &mask});
  require_defined("masked_select", x);
  require_defined("masked_select", mask, "mask");
  KILN_CHECK(mask.dtype() == DType::boolean, DTypeError,
             "masked_select: expected a bool mask, got {}", describe(mask));
  KILN_CHECK(mask.device() == x.device(), DeviceError,
             "masked_select: the mask is on {}, the input on {}", mask.device().str(),
             x.device().str());
  const Shape shape = broadcast_shapes("masked_select", x.shape(), mask.shape());
  const Tensor positions = true_positions(mask.expand(shape));
  return index_select(x.expand(shape).reshape({-1}), 0, positions);
}

UniqueResult unique(const Tensor& x) {
  profiler::OpScope profile("unique", {&x});
  require_defined("unique", x);
  const int64_t n = x.numel();
  if (n == 0)
    return {x.detach().reshape({0}), zeros(x.shape(), DType::i64, x.device()),
            zeros({0}, DType::i64, x.device())};
  const ValuesIndices s = sort(x.detach().reshape({-1}));
  // starts[i]: the i-th sorted element differs from the one before it.
  const Tensor starts = cat({ones({1}, DType::boolean, x.device()),
                             ne(s.values.narrow(0, 1, n - 1), s.values.narrow(0, 0, n - 1))},
                            0);
  // Each sorted element's index in the values (i64 throughout).
  const Tensor group = sub(cumsum(starts, 0), ones({1}, DType::i64, x.device()));
  const Tensor first = true_positions(starts);
  const Tensor ends = cat({first.narrow(0, 1, first.numel() - 1),
                           full({1}, static_cast<double>(n), DType::i64, x.device())},
                          0);
  return {index_select(s.values, 0, first),
          index_select(group, 0, argsort(s.indices)).reshape(x.shape()), sub(ends, first)};
}

UniqueResult unique(const Tensor& x, int64_t dim) {
  const char* op = "unique";
  profiler::OpScope profile(op, {&x});
  require_defined(op, x);
  KILN_CHECK(x.dim() >= 1, ShapeError, "unique: a dim of a 0-dim tensor ({}); use unique(x)",
             describe(x));
  const int64_t d = wrap_dim(op, dim, x.dim());
  const int64_t n = x.size(d);
  const Tensor front = x.detach().transpose(0, d).contiguous();  // [n, rest...]
  Shape rest(front.shape().begin() + 1, front.shape().end());
  auto back = [&](const Tensor& rows, int64_t count) {
    Shape shape{count};
    shape.insert(shape.end(), rest.begin(), rest.end());
    return rows.reshape(shape).transpose(0, d);
  };
  const int64_t m = shape_numel(rest);
  if (n == 0 || m == 0) {  // no slice, or slices without elements: all alike
    const int64_t count = n == 0 ? 0 : 1;
    return {back(front.narrow(0, 0, count).reshape({count, m}), count),
            zeros({n}, DType::i64, x.device()),
            full({count}, static_cast<double>(n), DType::i64, x.device())};
  }
  const Tensor rows = front.reshape({n, m});
  // Lexicographic order of the rows: stable sorts by each column, the last first.
  Tensor order = arange(n, DType::i64, x.device());
  for (int64_t c = m - 1; c >= 0; --c)
    order = index_select(order, 0, argsort(index_select(rows.select(1, c), 0, order), 0));
  const Tensor sorted = index_select(rows, 0, order);
  Tensor starts = ones({1}, DType::boolean, x.device());
  if (n > 1)
    starts = cat({starts, any(ne(sorted.narrow(0, 1, n - 1), sorted.narrow(0, 0, n - 1)), {1})}, 0);
  const Tensor group = sub(cumsum(starts, 0), ones({1}, DType::i64, x.device()));
  const Tensor first = true_positions(starts);
  const Tensor ends = cat({first.narrow(0, 1, first.numel() - 1),
                           full({1}, static_cast<double>(n), DType::i64, x.device())},
                          0);
  return {back(index_select(sorted, 0, first), first.numel()),
          index_select(group, 0, argsort(order)), sub(ends, first)};
}

}  // namespace kiln
