// cumsum, and the reversed running sum that is its backward (and whose backward it is); cumprod,
// and prod as the last of a running product over the reduced dims brought together.

#include "kiln/kernels/scan.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/profiler.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/reduce_dims.h"

namespace kiln {

namespace {

Tensor running_sum(const char* op, const Tensor& x, int64_t dim, bool reverse);

// The gradient of a running sum is the running sum of the gradient taken the other way.
struct CumsumBackward : Node {
  bool differentiable_backward() const override { return true; }
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

// The gradient of a running product (kernels/scan.h says how, without dividing by x).
struct CumprodBackward : Node {
  int64_t dim = 0;
  SavedTensor input;
  std::string name() const override { return "CumprodBackward"; }
  void release_saved() override { input.reset(); }
  bool differentiable_backward() const override { return true; }
  // Recorded (create_graph): the kernel's sum written with differentiable ops, still without a
  // division (exact around zeros): gradient_i = (x_0 ... x_{i-1}) * S_i, where
  // S_i = g_i + x_{i+1} * S_{i+1} runs backwards from S_{n-1} = g_{n-1}.
  Tensor composed(const Tensor& x, const Tensor& g) const {
    const int64_t n = x.size(dim);
    if (n == 0) return zeros_like(x);
    const Tensor running = cumprod(x, dim);
    const Tensor before = cat({ones_like(x.narrow(dim, 0, 1)), running.narrow(dim, 0, n - 1)}, dim);
    std::vector<Tensor> sums(static_cast<size_t>(n));
    sums[static_cast<size_t>(n - 1)] = g.narrow(dim, n - 1, 1);
    for (int64_t i = n - 2; i >= 0; --i)
      sums[static_cast<size_t>(i)] =
          add(g.narrow(dim, i, 1), mul(x.narrow(dim, i + 1, 1), sums[static_cast<size_t>(i + 1)]));
    return mul(before, cat(sums, dim));
  }
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor x = input.unpack(*this);
    if (GradMode::is_enabled()) {
      const Tensor xr = x.dim() == 0 ? x.reshape({1}) : x;
      return {composed(xr, g.to(x.dtype()).reshape(xr.shape())).reshape(x.shape())};
    }
    const Tensor xc = x.dim() == 0 ? x.reshape({1}) : x.contiguous();
    const Tensor gc = g.to(x.dtype()).reshape(xc.shape()).contiguous();
    Tensor out = empty(xc.shape(), x.dtype(), x.device());
    kernels_for<ScanKernels>("cumprod", x.device()).cumprod_backward(xc, gc, dim, out);
    return {out.reshape(x.shape())};
  }
};

}  // namespace

Tensor cumprod(const Tensor& x, int64_t dim) {
  if (AutocastArgs cast{"cumprod", {&x}}) return cumprod(cast[0], dim);
  profiler::OpScope profile("cumprod", {&x});
  require_defined("cumprod", x);
  dim = wrap_dim("cumprod", dim, x.dim());
  DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  Tensor out = empty(x.shape(), out_dtype, x.device());
  const Tensor in = x.dim() == 0 ? x.detach().reshape({1}) : x.detach();
  const Tensor dst = x.dim() == 0 ? out.view({1}) : out;
  kernels_for<ScanKernels>("cumprod", x.device()).cumprod(in, x.dim() == 0 ? 0 : dim, dst);
  if (should_record({&x})) {
    auto node = std::make_shared<CumprodBackward>();
    node->dim = x.dim() == 0 ? 0 : dim;
    node->input = SavedTensor(x);
    record(out, node, {&x});
  }
  return out;
}

Tensor prod(const Tensor& x, const Dims& dims, bool keepdim) {
  if (AutocastArgs cast{"prod", {&x}}) return prod(cast[0], dims, keepdim);
  require_defined("prod", x);
  const ReducedShape r = reduced_shape("prod", x, dims, keepdim);
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  if (r.count == 0) return ones(r.out_shape, out_dtype, x.device());
  // The kept dims first, then the reduced ones, as rows of r.count elements.
  std::vector<int64_t> order;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!r.reduced[d]) order.push_back(d);
  for (int64_t d = 0; d < x.dim(); ++d)
    if (r.reduced[d]) order.push_back(d);
  const Tensor rows =
      x.dim() == 0 ? x.reshape({1, 1}) : x.permute(order).reshape({x.numel() / r.count, r.count});
  return cumprod(rows, 1).select(1, r.count - 1).reshape(r.out_shape);
}

Tensor cumsum(const Tensor& x, int64_t dim) {
  if (AutocastArgs cast{"cumsum", {&x}}) return cumsum(cast[0], dim);
  return running_sum("cumsum", x, dim, false);
}

}  // namespace kiln
