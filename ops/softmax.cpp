// softmax and log_softmax: checks, the kernels, and the backward of each right below it.
#include "kiln/kernels/softmax.h"

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
#include "kiln/ops/reduce.h"
#include "kiln/ops/softmax.h"

namespace kiln {

namespace {

// Both backwards need only the output y: softmax's Jacobian is diag(y) - y y^T, and log_softmax's
// is I - softmax = I - exp(y) along the dim.
struct SoftmaxBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor output;
  int64_t dim = 0;
  bool log = false;
  std::string name() const override { return log ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor y = output.unpack(*this);
    if (GradMode::is_enabled()) {
      // Recorded (create_graph): the Jacobians above as differentiable ops.
      Tensor gy = g.to(y.dtype());
      if (log) return {sub(gy, mul(exp(y), sum(gy, {dim}, true)))};
      return {mul(y, sub(gy, sum(mul(gy, y), {dim}, true)))};
    }
    Tensor grad_x = empty(y.shape(), y.dtype(), y.device());
    kernels_for<SoftmaxKernels>("softmax_backward", y.device())
        .softmax_backward(y.contiguous(), g.to(y.dtype()).contiguous(), dim, log, grad_x);
    return {grad_x};
  }
  void release_saved() override { output.reset(); }
};

Tensor softmax_forward(const char* op, const Tensor& x, int64_t dim, bool log) {
  profiler::OpScope profile(op, {&x});
  require_defined(op, x);
  require_floating(op, x);
  const int64_t d = wrap_dim(op, dim, x.dim());
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  kernels_for<SoftmaxKernels>("softmax", x.device()).softmax(x.detach().contiguous(), d, log, out);
  if (should_record({&x})) {
    auto node = std::make_shared<SoftmaxBackward>();
    node->output = SavedTensor(out);
    node->dim = d;
    node->log = log;
    record(out, node, {&x});
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  if (AutocastArgs cast{"softmax", {&x}}) return softmax(cast[0], dim);
  return softmax_forward("softmax", x, dim, false);
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (AutocastArgs cast{"log_softmax", {&x}}) return log_softmax(cast[0], dim);
  return softmax_forward("log_softmax", x, dim, true);
}

}  // namespace kiln
