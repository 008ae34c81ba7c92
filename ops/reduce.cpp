// sum, mean and sum_to: the reductions autograd itself needs. The rest live in reduce_*.cpp.
#include "kiln/ops/reduce.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/profiler.h"
#include "kiln/kernels/reduce.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce_dims.h"

namespace kiln {

ReducedShape reduced_shape(const char* op, const Tensor& x, const Dims& dims, bool keepdim) {
  ReducedShape r;
  const int64_t n = x.dim();
  r.reduced.assign(n, dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(op, d, n);
    if (n == 0) continue;
    KILN_CHECK(!r.reduced[w], IndexError, "{}: dim {} appears more than once in {}", op, w,
               shape_str(dims));
    r.reduced[w] = true;
  }
  for (int64_t d = 0; d < n; ++d) {
    if (r.reduced[d]) {
      r.count *= x.shape()[d];
      r.kept_shape.push_back(1);
      if (keepdim) r.out_shape.push_back(1);
    } else {
      r.kept_shape.push_back(x.shape()[d]);
      r.out_shape.push_back(x.shape()[d]);
    }
  }
  return r;
}

namespace {

// Sum and mean share a backward: the gradient spreads evenly over the folded elements.
struct SumBackward : Node {
  bool differentiable_backward() const override { return true; }
  Shape input_shape, kept_shape;
  double scale = 1.0;  // 1 for sum, 1/count for mean
  bool is_mean = false;
  std::string name() const override { return is_mean ? "MeanBackward" : "SumBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor spread = g.reshape(kept_shape).expand(input_shape);
    return {scale == 1.0 ? spread : mul(spread, scale)};
  }
};

Tensor sum_or_mean(const char* op, const Tensor& x, const Dims& dims, bool keepdim, bool mean) {
  profiler::OpScope profile(op, {&x});
  require_defined(op, x);
  ReducedShape r = reduced_shape(op, x, dims, keepdim);
  DType out_dtype = x.dtype();
  if (mean) {
    KILN_CHECK(is_floating(x.dtype()), DTypeError,
               "mean: expected a floating-point input, got {}; convert with .to(DType::f32)",
               describe(x));
  } else if (!is_floating(x.dtype())) {
    out_dtype = DType::i64;
  }
  Tensor out = empty(r.out_shape, out_dtype, x.device());
  kernels_for<ReduceKernels>(mean ? "mean" : "sum", x.device())
      .sum(x.detach(), r.reduced, out, mean);
  if (should_record({&x})) {
    auto node = std::make_shared<SumBackward>();
    node->input_shape = x.shape();
    node->kept_shape = r.kept_shape;
    node->is_mean = mean;
    node->scale = mean ? 1.0 / static_cast<double>(r.count) : 1.0;
    record(out, node, {&x});
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) {
  if (AutocastArgs cast{"sum", {&x}}) return sum(cast[0], dims, keepdim);
  return sum_or_mean("sum", x, dims, keepdim, false);
}

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  return sum_or_mean("mean", x, dims, keepdim, true);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  KILN_CHECK(lead >= 0, ShapeError, "sum_to: cannot sum shape {} to the larger shape {}",
             shape_str(x.shape()), shape_str(shape));
  Dims dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
      continue;
    }
    int64_t want = shape[d - lead];
    KILN_CHECK(want == x.shape()[d] || want == 1, ShapeError,
               "sum_to: shape {} does not broadcast to {}", shape_str(shape), shape_str(x.shape()));
    if (want == 1 && x.shape()[d] != 1) dims.push_back(d);
  }
  if (dims.empty()) return x.reshape(shape);
  return sum(x, dims, true).reshape(shape);
}

}  // namespace kiln
