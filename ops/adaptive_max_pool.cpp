// adaptive_max_pool2d: max_pool2d when the windows tile the input evenly, otherwise the maximum of
// each window, taken with max over its flattened positions (row by row, so the first maximum is
// the one PyTorch's kernel picks) and stacked.
#include <cstdint>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/index.h"
#include "kiln/ops/pooling.h"
#include "kiln/ops/reduce.h"

namespace kiln {

namespace {

int64_t window_start(int64_t i, int64_t in, int64_t out) {
  return (i * in) / out;
}
int64_t window_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

}  // namespace

Tensor adaptive_max_pool2d(const Tensor& x, Pair output_size) {
  const char* op = "adaptive_max_pool2d";
  profiler::OpScope profile(op, {&x});
  require_defined(op, x);
  KILN_CHECK(x.dim() == 4, ShapeError, "{}: expected an input [N, C, H, W], got {}", op,
             describe(x));
  const int64_t h = x.size(2), w = x.size(3), oh = output_size[0], ow = output_size[1];
  KILN_CHECK(oh > 0 && ow > 0 && h > 0 && w > 0, ValueError,
             "{}: expected a positive output size and a non-empty input, got ({}, {}) from {}", op,
             oh, ow, describe(x));
  if (h % oh == 0 && w % ow == 0) return max_pool2d(x, {h / oh, w / ow});
  std::vector<Tensor> cells;
  for (int64_t i = 0; i < oh; ++i) {
    const int64_t h0 = window_start(i, h, oh), h1 = window_end(i, h, oh);
    const Tensor rows = x.narrow(2, h0, h1 - h0);
    for (int64_t j = 0; j < ow; ++j) {
      const int64_t w0 = window_start(j, w, ow), w1 = window_end(j, w, ow);
      cells.push_back(max(rows.narrow(3, w0, w1 - w0).flatten(2), 2).values);
    }
  }
  return stack(cells, 2).view({x.size(0), x.size(1), oh, ow});
}

}  // namespace kiln
