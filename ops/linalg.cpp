// Matrix product entry points: NumPy's promotion and broadcasting rules, the Eigen (CPU) or cuBLAS
// (GPU) kernel call, and each backward written with the same products.
#include "kiln/ops/linalg.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/profiler.h"
#include "kiln/kernels/copy.h"
#include "kiln/kernels/matmul.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/reduce.h"

namespace kiln {

namespace {

// t [..., d] as [rows, d]; the row count is spelled out because -1 is ambiguous when d is 0.
Tensor as_rows(const Tensor& t) {
  return t.reshape({shape_numel(Shape(t.shape().begin(), t.shape().end() - 1)), t.size(-1)});
}

// The 16-bit floats multiply in f32: Eigen's f16 GEMM is slow and accumulates in f16.
DType compute_dtype(DType dtype) {
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}

// a [..., n, k] times b [..., k, m] with equal batch dims, as a new contiguous [..., n, m] tensor
// of `dtype`; `addend` (broadcastable to the result) is added when defined.
Tensor product(const Tensor& a, const Tensor& b, Shape out_shape, DType dtype,
               const Tensor& addend = Tensor()) {
  const auto k = kernels_for<MatmulKernels>("matmul", a.device());
  // cuBLAS reads f16/bf16 as they are and accumulates in f32; Eigen gets f32 copies of them.
  const DType compute = k.takes_half ? dtype : compute_dtype(dtype);
  Tensor ca = k.as_gemm_operand(a.detach().to(compute));
  Tensor cb = k.as_gemm_operand(b.detach().to(compute));
  Tensor out = empty(out_shape, compute, a.device());
  if (addend.defined())
    kernels_for<CopyKernels>("matmul", a.device()).copy(addend.detach().expand(out_shape), out);
  k.batched_matmul(ca, cb, out, addend.defined());
  return out.to(dtype);
}

struct MatmulBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor a, b;
  Shape out_shape;  // with the dims 1-D operands gained, and broadcast batch dims
  std::string name() const override { return "MatmulBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor ta = a.unpack(*this), tb = b.unpack(*this);
    const Tensor a2 = ta.dim() == 1 ? ta.unsqueeze(0) : ta;
    const Tensor b2 = tb.dim() == 1 ? tb.unsqueeze(1) : tb;
    const Tensor g2 = g.reshape(out_shape);
    Tensor ga, gb;
    if (next_edges[0].valid())
      ga = sum_to(matmul(g2, b2.transpose(-1, -2)), a2.shape()).reshape(ta.shape());
    if (next_edges[1].valid()) {
      if (b2.dim() == 2 && a2.dim() > 2) {
        // The batch dims fold into rows: one product instead of a stack summed afterwards.
        gb = mm(as_rows(a2).t(), as_rows(g2));
      } else {
        gb = sum_to(matmul(a2.transpose(-1, -2), g2), b2.shape());
      }
      gb = gb.reshape(tb.shape());
    }
    return {ga, gb};
  }
  void release_saved() override { a.reset(), b.reset(); }
};

Tensor matmul_impl(const char* op, const Tensor& a, const Tensor& b) {
  profiler::OpScope profile(op, {&a, &b});
  require_same_floating(op, a, b, "first operand", "second operand");
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError,
             "{}: expected operands with at least one dim, got {} and {}", op, describe(a),
             describe(b));
  const Tensor a2 = a.dim() == 1 ? a.detach().unsqueeze(0) : a.detach();
  const Tensor b2 = b.dim() == 1 ? b.detach().unsqueeze(1) : b.detach();
  const int64_t n = a2.size(-2), k = a2.size(-1), m = b2.size(-1);
  KILN_CHECK(k == b2.size(-2), ShapeError, "{}: shapes {} and {} cannot be multiplied ({} vs {})",
             op, shape_str(a.shape()), shape_str(b.shape()), k, b2.size(-2));
  const Shape batch = broadcast_shapes(op, Shape(a2.shape().begin(), a2.shape().end() - 2),
                                       Shape(b2.shape().begin(), b2.shape().end() - 2));
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {n, m});

  Tensor out;
  if (b2.dim() == 2 && a2.dim() > 2) {
    // A stack times one matrix is one taller product: Eigen gets a single large GEMM.
    out = product(as_rows(a2), b2, {shape_numel(batch) * n, m}, a.dtype());
  } else {
    Shape a_shape = batch, b_shape = batch;
    a_shape.insert(a_shape.end(), {n, k});
    b_shape.insert(b_shape.end(), {k, m});
    out = product(a2.expand(a_shape), b2.expand(b_shape), out_shape, a.dtype());
  }
  Shape result_shape = batch;
  if (a.dim() > 1) result_shape.push_back(n);
  if (b.dim() > 1) result_shape.push_back(m);
  out = out.view(result_shape);

  if (should_record({&a, &b})) {
    auto node = std::make_shared<MatmulBackward>();
    node->a = SavedTensor(a);
    node->b = SavedTensor(b);
    node->out_shape = out_shape;
    record(out, node, {&a, &b});
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (AutocastArgs cast{"matmul", {&a, &b}}) return matmul(cast[0], cast[1]);
  return matmul_impl("matmul", a, b);
}

Tensor mm(const Tensor& a, const Tensor& b) {
  if (AutocastArgs cast{"mm", {&a, &b}}) return mm(cast[0], cast[1]);
  require_defined("mm", a, "first operand");
  require_defined("mm", b, "second operand");
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, ShapeError,
             "mm: expected two 2-D matrices, got {} and {}", describe(a), describe(b));
  return matmul_impl("mm", a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (AutocastArgs cast{"bmm", {&a, &b}}) return bmm(cast[0], cast[1]);
  require_defined("bmm", a, "first operand");
  require_defined("bmm", b, "second operand");
  KILN_CHECK(a.dim() == 3 && b.dim() == 3, ShapeError,
             "bmm: expected two 3-D batches of matrices, got {} and {}", describe(a), describe(b));
  KILN_CHECK(a.size(0) == b.size(0), ShapeError,
             "bmm: batch sizes differ ({} vs {}) in {} and {}; bmm does not broadcast, use matmul",
             a.size(0), b.size(0), shape_str(a.shape()), shape_str(b.shape()));
  return matmul_impl("bmm", a, b);
}

namespace {

struct LinearBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor x, weight;
  std::string name() const override { return "LinearBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor tx = x.unpack(*this), tw = weight.unpack(*this);
    const Tensor g2 = as_rows(g);
    Tensor gx, gw, gb;
    if (next_edges[0].valid()) gx = mm(g2, tw).reshape(tx.shape());
    if (next_edges[1].valid()) gw = mm(g2.t(), as_rows(tx));
    if (next_edges[2].valid()) gb = sum(g2, {0});
    return {gx, gw, gb};
  }
  void release_saved() override { x.reset(), weight.reset(); }
};

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (AutocastArgs cast{"linear", {&x, &weight, &bias}}) return linear(cast[0], cast[1], cast[2]);
  profiler::OpScope profile("linear", {&x, &weight, &bias});
  require_same_floating("linear", x, weight, "input", "weight");
  KILN_CHECK(weight.dim() == 2, ShapeError,
             "linear: expected a 2-D weight [out_features, in_features], got {}", describe(weight));
  const int64_t out_features = weight.size(0), in_features = weight.size(1);
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == in_features, ShapeError,
             "linear: input {} must end in in_features = {} to match weight {}", describe(x),
             in_features, describe(weight));
  if (bias.defined()) {
    common_device("linear", {&x, &bias});
    KILN_CHECK(bias.dtype() == x.dtype(), DTypeError,
               "linear: expected bias of the input's dtype, got input {} and bias {}", describe(x),
               describe(bias));
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == out_features, ShapeError,
               "linear: expected bias of shape [{}] to match weight {}, got {}", out_features,
               describe(weight), describe(bias));
  }
  const Tensor rows = as_rows(x.detach());
  Tensor out = product(rows, weight.detach().t(), {rows.size(0), out_features}, x.dtype(), bias);
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(out_features);
  out = out.view(out_shape);
  if (should_record({&x, &weight, &bias})) {
    auto node = std::make_shared<LinearBackward>();
    node->x = SavedTensor(x);
    node->weight = SavedTensor(weight);
    record(out, node, {&x, &weight, &bias});
  }
  return out;
}

}  // namespace kiln
