// sort, argsort and topk: the kernels rank rows (kernels/sort.h); the ops bring the dim last and
// contiguous for them and gather the values, whose backward scatters the gradient back.
#include "kiln/ops/sort.h"

#include <cstdint>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/core/shape.h"
#include "kiln/kernels/sort.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"

namespace kiln {

namespace {

// The order of x along dim as i64 indices of x's shape (contiguous).
Tensor order(const char* op, const Tensor& x, int64_t dim, bool descending) {
  profiler::OpScope profile(op, {&x});
  require_defined(op, x);
  if (x.dim() == 0) return zeros({}, DType::i64, x.device());
  dim = wrap_dim(op, dim, x.dim());
  const int64_t last = x.dim() - 1;
  const Tensor rows = x.detach().transpose(dim, last).contiguous();
  const int64_t n = x.size(dim);
  const int64_t count = n == 0 ? 0 : x.numel() / n;
  Tensor indices = empty(rows.shape(), DType::i64, x.device());
  kernels_for<SortKernels>(op, x.device())
      .sort_rows(rows.view({count, n}), descending, indices.view({count, n}));
  return indices.transpose(dim, last).contiguous();
}

}  // namespace

ValuesIndices sort(const Tensor& x, int64_t dim, bool descending) {
  Tensor indices = order("sort", x, dim, descending);
  if (x.dim() == 0) return {x.clone(), indices};
  return {gather(x, dim, indices), indices};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  return order("argsort", x, dim, descending);
}

ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  require_defined("topk", x);
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim("topk", dim, x.dim());
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  if (k < 0 || k > n)
    throw ValueError("topk: k must be in [0, " + std::to_string(n) + "] (the size of dim " +
                     std::to_string(d) + " of " + shape_str(x.shape()) + "), got " +
                     std::to_string(k));
  if (x.dim() == 0) return sort(x, d, largest);
  Tensor indices = order("topk", x, d, largest).narrow(d, 0, k).contiguous();
  return {gather(x, d, indices), indices};
}

}  // namespace kiln
