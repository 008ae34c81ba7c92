// cumsum, and the reversed running sum that is its backward (and whose backward it is).

#include "kiln/kernels/scan.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/profiler.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/reduce.h"

namespace kiln {

namespace {

Tensor running_sum(const char* op, const Tensor& x, int64_t dim, bool reverse);

// The gradient of a running sum is the running sum of the gradient taken the other way.
struct CumsumBackward : Node {
  int64_t dim = 0;
  bool reverse = false;
  std::string name() const override { return reverse ? "ReverseCumsumBackward" : "CumsumBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    return {running_sum("cumsum", g, dim, !reverse)};
  }
};

Tensor running_sum(const char* op, const Tensor& x, int64_t dim, bool reverse) {
  profiler::OpScope profile(op, {&x});
  require_defined(op, x);
  dim = wrap_dim(op, dim, x.dim());
  // Integer and bool running sums widen to i64, as in PyTorch.
  DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  Tensor out = empty(x.shape(), out_dtype, x.device());
  // A scalar scans as a one-element line.
  const Tensor in = x.dim() == 0 ? x.detach().reshape({1}) : x.detach();
  const Tensor dst = x.dim() == 0 ? out.view({1}) : out;
  const int64_t line_dim = x.dim() == 0 ? 0 : dim;
  kernels_for<ScanKernels>("cumsum", x.device()).cumsum(in, line_dim, reverse, dst);
  if (should_record({&x})) {
    auto node = std::make_shared<CumsumBackward>();
    node->dim = dim;
    node->reverse = reverse;
    record(out, node, {&x});
  }
  return out;
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  if (AutocastArgs cast{"cumsum", {&x}}) return cumsum(cast[0], dim);
  return running_sum("cumsum", x, dim, false);
}

}  // namespace kiln
