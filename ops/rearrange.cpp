#include "kiln/ops/rearrange.h"

#include <cstddef>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"
#include "kiln/ops/reduce.h"

namespace kiln {
namespace {

// Which elements of the last two dims lie on or below (lower) or on or above diagonal k.
Tensor triangle(const Tensor& x, int64_t k, bool lower) {
  const char* op = lower ? "tril" : "triu";
  require_defined(op, x);
  KILN_CHECK(x.dim() >= 2, ShapeError, "{}: expected a tensor of 2 or more dims, got {}", op,
             shape_str(x.shape()));
  const int64_t rows = x.size(-2), cols = x.size(-1);
  const Tensor col_minus_row = sub(arange(cols, DType::i64, x.device()).unsqueeze(0),
                                   arange(rows, DType::i64, x.device()).unsqueeze(1));
  const Tensor keep =
      lower ? le(col_minus_row, static_cast<double>(k)) : ge(col_minus_row, static_cast<double>(k));
  return where(keep, x, zeros({}, x.dtype(), x.device()));
}

}  // namespace

Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  profiler::OpScope profile("flip", {&x});
  require_defined("flip", x);
  std::set<int64_t> seen;
  Tensor out = x;
  for (int64_t d : dims) {
    const int64_t dim = wrap_dim("flip", d, x.dim());
    KILN_CHECK(seen.insert(dim).second, ValueError, "flip: dim {} appears more than once", dim);
    const int64_t n = x.size(dim);
    const Tensor reversed = sub(full({n}, static_cast<double>(n - 1), DType::i64, x.device()),
                                arange(n, DType::i64, x.device()));
    out = index_select(out, dim, reversed);
  }
  return dims.empty() ? x.clone() : out;
}

Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims) {
  profiler::OpScope profile("roll", {&x});
  require_defined("roll", x);
  if (dims.empty()) {
    KILN_CHECK(shifts.size() == 1, ValueError,
               "roll: without dims, expected one shift (over the flattened tensor), got {}",
               shifts.size());
    return roll(x.reshape({x.numel()}), shifts, {0}).reshape(x.shape());
  }
  KILN_CHECK(shifts.size() == dims.size(), ValueError,
             "roll: expected one shift per dim, got {} shifts and {} dims", shifts.size(),
             dims.size());
  Tensor out = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t dim = wrap_dim("roll", dims[i], x.dim());
    const int64_t n = x.size(dim);
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    out = cat({out.narrow(dim, n - s, s), out.narrow(dim, 0, n - s)}, dim);
  }
  return out;
}

Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats) {
  profiler::OpScope profile("repeat", {&x});
  require_defined("repeat", x);
  const auto rank = static_cast<int64_t>(repeats.size());
  KILN_CHECK(rank >= x.dim(), ValueError,
             "repeat: expected at least as many repeats as x has dims ({}), got {}", x.dim(), rank);
  for (int64_t r : repeats)
    KILN_CHECK(r >= 0, ValueError, "repeat: repeats must be non-negative, got {}", r);
  // x padded with leading dims of 1, each dim d becoming [repeats[d], size[d]] by expanding a new
  // dim in front of it, then merged.
  Shape padded(static_cast<size_t>(rank - x.dim()), 1);
  for (int64_t s : x.shape()) padded.push_back(s);
  Shape interleaved, expanded, merged;
  for (int64_t d = 0; d < rank; ++d) {
    interleaved.push_back(1);
    interleaved.push_back(padded[static_cast<size_t>(d)]);
    expanded.push_back(repeats[static_cast<size_t>(d)]);
    expanded.push_back(padded[static_cast<size_t>(d)]);
    merged.push_back(repeats[static_cast<size_t>(d)] * padded[static_cast<size_t>(d)]);
  }
  return x.reshape(interleaved).expand(expanded).reshape(merged);
}

Tensor tile(const Tensor& x, std::vector<int64_t> repeats) {
  require_defined("tile", x);
  while (static_cast<int64_t>(repeats.size()) < x.dim()) repeats.insert(repeats.begin(), 1);
  return repeat(x, repeats);
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  profiler::OpScope profile("tril", {&x});
  return triangle(x, diagonal, true);
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  profiler::OpScope profile("triu", {&x});
  return triangle(x, diagonal, false);
}

Tensor all(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  profiler::OpScope profile("all", {&x});
  require_defined("all", x);
  return eq(sum(eq(x, 0.0).to(DType::i64), dims, keepdim), 0.0);
}

Tensor any(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  profiler::OpScope profile("any", {&x});
  require_defined("any", x);
  return gt(sum(ne(x, 0.0).to(DType::i64), dims, keepdim), 0.0);
}

}  // namespace kiln
