// Elementwise op entry points: promotion and broadcasting, the kernel call, and each op's backward
// beside its forward, written with the same ops: a binary op's node just above the op, a unary
// op's formula inside its call. A node is made only when an input wants a gradient.
#include "kiln/ops/elementwise.h"

#include <cctype>
#include <cmath>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/profiler.h"
#include "kiln/kernels/elementwise.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/memory_order.h"
#include "kiln/ops/reduce.h"

namespace kiln {

namespace {

// The scalar as a 0-dim tensor of the dtype PyTorch would give a Python number next to `like`.
Tensor wrap_scalar(double value, const Tensor& like) {
  DType dtype = like.dtype();
  bool integral_value = std::floor(value) == value && std::isfinite(value);
  if (!is_floating(dtype)) {
    if (!integral_value)
      dtype = DType::f32;
    else if (dtype == DType::boolean)
      dtype = DType::i64;
  }
  return scalar_tensor(value, dtype, like.device());
}

// Runs a binary kernel on a and b promoted to `compute` and broadcast; out dtype is `out_dtype`.
Tensor binary_forward(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b,
                      DType compute, DType out_dtype, double alpha = 1.0) {
  profiler::OpScope profile(op, {&a, &b});
  require_defined(op, a, "first input");
  require_defined(op, b, "second input");
  Device device = common_device(op, {&a, &b});
  Shape shape = broadcast_shapes(op, a.shape(), b.shape());
  Tensor ca = a.detach().to(compute).expand(shape);
  Tensor cb = b.detach().to(compute).expand(shape);
  const MemoryFormat format = result_format(shape, {&a, &b});
  Tensor out = empty(shape, out_dtype, device, format);
  kernels_for<ElementwiseKernels>("binary", device)
      .binary(kind, in_memory_order(ca, format), in_memory_order(cb, format),
              in_memory_order(out, format), alpha);
  return out;
}

Tensor unary_forward(const char* op, UnaryOp kind, const Tensor& x, DType compute, DType out_dtype,
                     UnaryParams params = {}) {
  profiler::OpScope profile(op, {&x});
  require_defined(op, x);
  Tensor cx = x.detach().to(compute);
  const MemoryFormat format = result_format(x.shape(), {&x});
  Tensor out = empty(x.shape(), out_dtype, x.device(), format);
  kernels_for<ElementwiseKernels>("unary", x.device())
      .unary(kind, in_memory_order(cx, format), in_memory_order(out, format), params);
  return out;
}

// Unary ops whose result is fractional compute integers in f32, as PyTorch.
DType float_compute(const Tensor& x) {
  return is_floating(x.dtype()) ? x.dtype() : DType::f32;
}

// Shared fields of a binary node: where each input's gradient must be summed and cast back to.
struct BinaryNode : Node {
  bool differentiable_backward() const override { return true; }
  Shape a_shape, b_shape;
  DType a_dtype, b_dtype;
  void remember(const Tensor& a, const Tensor& b) {
    a_shape = a.shape();
    b_shape = b.shape();
    a_dtype = a.dtype();
    b_dtype = b.dtype();
  }
  std::vector<Tensor> reduce(const Tensor& ga, const Tensor& gb) const {
    return {ga.defined() ? sum_to(ga, a_shape).to(a_dtype) : Tensor(),
            gb.defined() ? sum_to(gb, b_shape).to(b_dtype) : Tensor()};
  }
  bool wants(size_t i) const { return i < next_edges.size() && next_edges[i].valid(); }
};

// Records the node make() returns for out = op(a, b) when a or b wants a gradient; under
// NoGradGuard, or for inputs that want none, no node is made (nor any tensor saved).
template <class Make>
Tensor finish_binary(Tensor out, const Tensor& a, const Tensor& b, Make make) {
  if (should_record({&a, &b})) {
    auto node = make();
    node->remember(a, b);
    record(out, node, {&a, &b});
  }
  return out;
}

DType arithmetic_type(const char* op, const Tensor& a, const Tensor& b) {
  require_defined(op, a, "first input");
  require_defined(op, b, "second input");
  return promote_types(a.dtype(), b.dtype());
}

}  // namespace

// ---- binary arithmetic: each op's backward node, then the op ----

namespace {
struct AddBackward : BinaryNode {
  double alpha = 1.0;
  std::string name() const override { return "AddBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    return reduce(g, wants(1) ? (alpha == 1.0 ? g : mul(g, alpha)) : Tensor());
  }
};

std::shared_ptr<AddBackward> add_backward(double alpha) {
  auto node = std::make_shared<AddBackward>();
  node->alpha = alpha;
  return node;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  DType t = arithmetic_type("add", a, b);
  Tensor out = binary_forward("add", BinaryOp::add, a, b, t, t, alpha);
  return finish_binary(out, a, b, [&] { return add_backward(alpha); });
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  DType t = arithmetic_type("sub", a, b);
  KILN_CHECK(t != DType::boolean, DTypeError,
             "sub: subtracting bool tensors is not supported ({} and {}); use logical_xor or "
             "convert to an integer dtype",
             describe(a), describe(b));
  Tensor out = binary_forward("sub", BinaryOp::sub, a, b, t, t, alpha);
  return finish_binary(out, a, b, [&] { return add_backward(-alpha); });
}

namespace {
struct MulBackward : BinaryNode {
  SavedTensor a, b;
  std::string name() const override { return "MulBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    return reduce(wants(0) ? mul(g, b.unpack(*this)) : Tensor(),
                  wants(1) ? mul(g, a.unpack(*this)) : Tensor());
  }
  void release_saved() override { a.reset(), b.reset(); }
};
}  // namespace

Tensor mul(const Tensor& a, const Tensor& b) {
  DType t = arithmetic_type("mul", a, b);
  Tensor out = binary_forward("mul", BinaryOp::mul, a, b, t, t);
  return finish_binary(out, a, b, [&] {
    auto node = std::make_shared<MulBackward>();
    node->a = SavedTensor(a), node->b = SavedTensor(b);
    return node;
  });
}

namespace {
struct DivBackward : BinaryNode {
  SavedTensor a, b;
  std::string name() const override { return "DivBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor tb = b.unpack(*this);
    Tensor ga = wants(0) ? div(g, tb) : Tensor();
    Tensor gb = wants(1) ? neg(div(mul(g, a.unpack(*this)), mul(tb, tb))) : Tensor();
    return reduce(ga, gb);
  }
  void release_saved() override { a.reset(), b.reset(); }
};
}  // namespace

Tensor div(const Tensor& a, const Tensor& b) {
  DType t = arithmetic_type("div", a, b);
  if (!is_floating(t)) t = DType::f32;  // true division, as PyTorch
  Tensor out = binary_forward("div", BinaryOp::div, a, b, t, t);
  return finish_binary(out, a, b, [&] {
    auto node = std::make_shared<DivBackward>();
    node->a = SavedTensor(a), node->b = SavedTensor(b);
    return node;
  });
}

namespace {
struct PowBackward : BinaryNode {
  SavedTensor base, exponent, result;
  std::string name() const override { return "PowBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor x = base.unpack(*this), e = exponent.unpack(*this);
    // d(x^e)/dx = e x^(e-1), taken as 0 where e == 0 (as PyTorch: x^0 is 1 even at NaN or 0).
    Tensor ga;
    if (wants(0)) ga = mul(g, masked_fill(mul(e, pow(x, sub(e, 1.0))), eq(e, 0.0), 0.0));
    // d(x^e)/de = x^e log x; PyTorch takes it as 0 where x == 0 and e >= 0 (0 * -inf otherwise),
    // so a NaN exponent keeps its NaN gradient.
    Tensor gb;
    if (wants(1)) {
      Tensor term = mul(result.unpack(*this), log(x));
      gb = mul(g, masked_fill(term, logical_and(eq(x, 0.0), ge(e, 0.0)), 0.0));
    }
    return reduce(ga, gb);
  }
  void release_saved() override { base.reset(), exponent.reset(), result.reset(); }
};
}  // namespace

Tensor pow(const Tensor& base, const Tensor& exponent) {
  if (AutocastArgs cast{"pow", {&base, &exponent}}) return pow(cast[0], cast[1]);
  DType t = arithmetic_type("pow", base, exponent);
  KILN_CHECK(t != DType::boolean, DTypeError, "pow: not defined for bool tensors ({} and {})",
             describe(base), describe(exponent));
  Tensor out = binary_forward("pow", BinaryOp::pow, base, exponent, t, t);
  return finish_binary(out, base, exponent, [&] {
    auto node = std::make_shared<PowBackward>();
    node->base = SavedTensor(base);
    node->exponent = SavedTensor(exponent);
    node->result = SavedTensor(out);
    return node;
  });
}

namespace {
// maximum/minimum: the gradient goes to the chosen input, split in half on ties. As PyTorch, an
// input loses its share only where the other strictly wins, so where either is NaN (the result is
// NaN, and every comparison false) both inputs get the whole gradient.
struct MaxMinBackward : BinaryNode {
  SavedTensor a, b;
  bool is_max = true;
  std::string name() const override { return is_max ? "MaximumBackward" : "MinimumBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor ta = a.unpack(*this), tb = b.unpack(*this);
    Tensor half_on_tie = where(eq(ta, tb), mul(g, 0.5), g);
    Tensor zero = zeros({}, g.dtype(), g.device());
    Tensor ga, gb;
    if (wants(0)) ga = where(is_max ? lt(ta, tb) : gt(ta, tb), zero, half_on_tie);
    if (wants(1)) gb = where(is_max ? gt(ta, tb) : lt(ta, tb), zero, half_on_tie);
    return reduce(ga, gb);
  }
  void release_saved() override { a.reset(), b.reset(); }
};

Tensor max_min(const char* op, bool is_max, const Tensor& a, const Tensor& b) {
  DType t = arithmetic_type(op, a, b);
  Tensor out = binary_forward(op, is_max ? BinaryOp::maximum : BinaryOp::minimum, a, b, t, t);
  return finish_binary(out, a, b, [&] {
    auto node = std::make_shared<MaxMinBackward>();
    node->is_max = is_max;
    node->a = SavedTensor(a), node->b = SavedTensor(b);
    return node;
  });
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return max_min("maximum", true, a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return max_min("minimum", false, a, b);
}

Tensor add(const Tensor& a, double b) {
  return add(a, wrap_scalar(b, a));
}
Tensor sub(const Tensor& a, double b) {
  return sub(a, wrap_scalar(b, a));
}
Tensor rsub(double a, const Tensor& b) {
  return sub(wrap_scalar(a, b), b);
}
Tensor mul(const Tensor& a, double b) {
  return mul(a, wrap_scalar(b, a));
}
Tensor div(const Tensor& a, double b) {
  return div(a, wrap_scalar(b, a));
}
Tensor rdiv(double a, const Tensor& b) {
  return div(wrap_scalar(a, b), b);
}

namespace {
struct PowScalarBackward : Node {
  bool differentiable_backward() const override { return true; }
  SavedTensor x;
  double exponent;
  std::string name() const override { return "PowBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    if (exponent == 0.0) return {zeros_like(g)};
    return {mul(g, mul(pow(x.unpack(*this), exponent - 1.0), exponent))};
  }
  void release_saved() override { x.reset(); }
};
}  // namespace

Tensor pow(const Tensor& base, double exponent) {
  if (AutocastArgs cast{"pow", {&base}}) return pow(cast[0], exponent);
  require_defined("pow", base);
  bool integral_exponent = std::floor(exponent) == exponent;
  DType t = base.dtype();
  KILN_CHECK(t != DType::boolean, DTypeError, "pow: not defined for bool tensors ({})",
             describe(base));
  if (!is_floating(t)) {
    KILN_CHECK(integral_exponent && exponent >= 0, ValueError,
               "pow: integer tensor {} to the power {}: only non-negative integer exponents keep "
               "an integer result; convert to a floating dtype first",
               describe(base), exponent);
  }
  // PyTorch computes x^0.5 and x^-0.5 as sqrt and rsqrt, which differ from std::pow at -inf and
  // -0 (pow(-inf, 0.5) is inf, sqrt(-inf) NaN); the backward's x^-0.5 then agrees with it too.
  const bool root = is_floating(t) && (exponent == 0.5 || exponent == -0.5);
  const UnaryOp kind = !root ? UnaryOp::pow_scalar : exponent > 0 ? UnaryOp::sqrt : UnaryOp::rsqrt;
  Tensor out = unary_forward("pow", kind, base, t, t, {exponent, 0.0});
  if (should_record({&base})) {
    auto node = std::make_shared<PowScalarBackward>();
    node->x = SavedTensor(base);
    node->exponent = exponent;
    record(out, node, {&base});
  }
  return out;
}

// ---- unary ops ----

namespace {

// A unary node whose backward is a function of (grad, input, output).
struct UnaryBackward : Node {
  bool differentiable_backward() const override { return true; }
  std::string op_name;
  SavedTensor input, output;
  std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> formula;
  std::string name() const override {
    // leaky_relu -> LeakyReluBackward, as PyTorch names its nodes.
    std::string camel;
    bool upper = true;
    for (char c : op_name) {
      if (c == '_') {
        upper = true;
        continue;
      }
      camel += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
      upper = false;
    }
    return camel + "Backward";
  }
  std::vector<Tensor> apply(const Tensor& g) override {
    return {formula(g, input.unpack(*this), output.unpack(*this))};
  }
  void release_saved() override { input.reset(), output.reset(); }
};

enum class Save { none, input, output, both };

Tensor unary_op(const char* op, UnaryOp kind, const Tensor& x, bool fractional, Save save,
                std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> formula,
                UnaryParams params = {}) {
  require_defined(op, x);
  DType t = fractional ? float_compute(x) : x.dtype();
  Tensor out = unary_forward(op, kind, x, t, t, params);
  if (formula && should_record({&x})) {
    auto node = std::make_shared<UnaryBackward>();
    node->op_name = op;
    if (save == Save::input || save == Save::both) node->input = SavedTensor(x);
    if (save == Save::output || save == Save::both) node->output = SavedTensor(out);
    node->formula = std::move(formula);
    record(out, node, {&x});
  }
  return out;
}

// The mask as the gradient's dtype, so it multiplies without promoting.
Tensor as_grad_mask(const Tensor& mask, const Tensor& g) {
  return mask.to(g.dtype());
}

}  // namespace

Tensor neg(const Tensor& x) {
  KILN_CHECK(!x.defined() || x.dtype() != DType::boolean, DTypeError,
             "neg: negation of a bool tensor is not supported ({}); use logical_not", describe(x));
  return unary_op("neg", UnaryOp::neg, x, false, Save::none,
                  [](const Tensor& g, const Tensor&, const Tensor&) { return neg(g); });
}

Tensor abs(const Tensor& x) {
  return unary_op(
      "abs", UnaryOp::abs, x, false, Save::input,
      [](const Tensor& g, const Tensor& in, const Tensor&) { return mul(g, sign(in)); });
}

Tensor sign(const Tensor& x) {
  return unary_op("sign", UnaryOp::sign, x, false, Save::none,
                  [](const Tensor& g, const Tensor&, const Tensor&) { return zeros_like(g); });
}

namespace {

// floor, ceil, round and trunc: steps, so their gradient is zero wherever it exists, as torch's.
Tensor rounding_op(const char* op, UnaryOp kind, const Tensor& x) {
  KILN_CHECK(!x.defined() || x.dtype() != DType::boolean, DTypeError,
             "{}: not defined for a bool tensor ({})", op, describe(x));
  return unary_op(op, kind, x, false, Save::none,
                  [](const Tensor& g, const Tensor&, const Tensor&) { return zeros_like(g); });
}

}  // namespace

Tensor floor(const Tensor& x) {
  return rounding_op("floor", UnaryOp::floor, x);
}

Tensor ceil(const Tensor& x) {
  return rounding_op("ceil", UnaryOp::ceil, x);
}

Tensor round(const Tensor& x) {
  return rounding_op("round", UnaryOp::round, x);
}

Tensor trunc(const Tensor& x) {
  return rounding_op("trunc", UnaryOp::trunc, x);
}

Tensor exp(const Tensor& x) {
  if (AutocastArgs cast{"exp", {&x}}) return exp(cast[0]);
  return unary_op("exp", UnaryOp::exp, x, true, Save::output,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return mul(g, y); });
}

Tensor log(const Tensor& x) {
  if (AutocastArgs cast{"log", {&x}}) return log(cast[0]);
  return unary_op("log", UnaryOp::log, x, true, Save::input,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return div(g, in); });
}

Tensor sqrt(const Tensor& x) {
  return unary_op(
      "sqrt", UnaryOp::sqrt, x, true, Save::output,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return div(g, mul(y, 2.0)); });
}

Tensor rsqrt(const Tensor& x) {
  if (AutocastArgs cast{"rsqrt", {&x}}) return rsqrt(cast[0]);
  return unary_op("rsqrt", UnaryOp::rsqrt, x, true, Save::output,
                  [](const Tensor& g, const Tensor&, const Tensor& y) {
                    return mul(g, mul(pow(y, 3.0), -0.5));
                  });
}

Tensor square(const Tensor& x) {
  return unary_op(
      "square", UnaryOp::square, x, false, Save::input,
      [](const Tensor& g, const Tensor& in, const Tensor&) { return mul(g, mul(in, 2.0)); });
}

Tensor reciprocal(const Tensor& x) {
  if (AutocastArgs cast{"reciprocal", {&x}}) return reciprocal(cast[0]);
  return unary_op(
      "reciprocal", UnaryOp::reciprocal, x, true, Save::output,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return neg(mul(g, mul(y, y))); });
}

Tensor erf(const Tensor& x) {
  return unary_op("erf", UnaryOp::erf, x, true, Save::input,
                  [](const Tensor& g, const Tensor& in, const Tensor&) {
                    return mul(g, mul(exp(neg(square(in))), 2.0 / std::sqrt(M_PI)));
                  });
}

Tensor sin(const Tensor& x) {
  return unary_op("sin", UnaryOp::sin, x, true, Save::input,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return mul(g, cos(in)); });
}

Tensor cos(const Tensor& x) {
  return unary_op(
      "cos", UnaryOp::cos, x, true, Save::input,
      [](const Tensor& g, const Tensor& in, const Tensor&) { return neg(mul(g, sin(in))); });
}

Tensor relu(const Tensor& x) {
  return unary_op("relu", UnaryOp::relu, x, false, Save::output,
                  [](const Tensor& g, const Tensor&, const Tensor& y) {
                    // Recorded (create_graph): the same mask as differentiable ops.
                    if (GradMode::is_enabled()) return mul(g, as_grad_mask(gt(y, 0.0), g));
                    const MemoryFormat format = result_format(y.shape(), {&g, &y});
                    Tensor out = empty(y.shape(), y.dtype(), y.device(), format);
                    kernels_for<ElementwiseKernels>("relu_backward", y.device())
                        .relu_backward(in_memory_order(g.to(y.dtype()), format),
                                       in_memory_order(y, format), in_memory_order(out, format));
                    return out;
                  });
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return unary_op("leaky_relu", UnaryOp::leaky_relu, x, true, Save::input,
                  [negative_slope](const Tensor& g, const Tensor& in, const Tensor&) {
                    return where(gt(in, 0.0), g, mul(g, negative_slope));
                  },
                  {negative_slope, 0.0});
}

Tensor sigmoid(const Tensor& x) {
  return unary_op(
      "sigmoid", UnaryOp::sigmoid, x, true, Save::output,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return mul(g, mul(y, rsub(1.0, y))); });
}

Tensor tanh(const Tensor& x) {
  return unary_op(
      "tanh", UnaryOp::tanh, x, true, Save::output,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return mul(g, rsub(1.0, square(y))); });
}

Tensor gelu(const Tensor& x, const std::string& approximate) {
  KILN_CHECK(approximate == "none" || approximate == "tanh", ValueError,
             "gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate);
  if (approximate == "tanh") {
    return unary_op("gelu", UnaryOp::gelu_tanh, x, true, Save::input,
                    [](const Tensor& g, const Tensor& in, const Tensor&) {
                      // d/dx 0.5 x (1 + tanh(u)), u = k (x + c x^3)
                      const double k = 0.7978845608028654, c = 0.044715;
                      Tensor u = mul(add(in, mul(pow(in, 3.0), c)), k);
                      Tensor t = tanh(u);
                      Tensor du = mul(add(mul(square(in), 3.0 * c), 1.0), k);
                      Tensor d = add(mul(add(t, 1.0), 0.5),
                                     mul(mul(in, rsub(1.0, square(t))), mul(du, 0.5)));
                      return mul(g, d);
                    });
  }
  return unary_op("gelu", UnaryOp::gelu, x, true, Save::input,
                  [](const Tensor& g, const Tensor& in, const Tensor&) {
                    // Phi(x) + x phi(x)
                    Tensor cdf = mul(add(erf(mul(in, M_SQRT1_2)), 1.0), 0.5);
                    Tensor pdf = mul(exp(mul(square(in), -0.5)), 1.0 / std::sqrt(2.0 * M_PI));
                    return mul(g, add(cdf, mul(in, pdf)));
                  });
}

Tensor silu(const Tensor& x) {
  return unary_op("silu", UnaryOp::silu, x, true, Save::input,
                  [](const Tensor& g, const Tensor& in, const Tensor&) {
                    Tensor s = sigmoid(in);
                    return mul(g, mul(s, add(mul(in, rsub(1.0, s)), 1.0)));
                  });
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  KILN_CHECK(min.has_value() || max.has_value(), ValueError,
             "clamp: at least one of min and max must be given");
  double lo = min.value_or(-INFINITY), hi = max.value_or(INFINITY);
  return unary_op("clamp", UnaryOp::clamp, x, false, Save::input,
                  [lo, hi](const Tensor& g, const Tensor& in, const Tensor&) {
                    return mul(g, as_grad_mask(logical_and(ge(in, lo), le(in, hi)), g));
                  },
                  {lo, hi});
}

// ---- comparisons and selection ----

namespace {
Tensor compare(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  DType t = arithmetic_type(op, a, b);
  return binary_forward(op, kind, a, b, t, DType::boolean);
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) {
  return compare("eq", BinaryOp::eq, a, b);
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return compare("ne", BinaryOp::ne, a, b);
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return compare("lt", BinaryOp::lt, a, b);
}
Tensor le(const Tensor& a, const Tensor& b) {
  return compare("le", BinaryOp::le, a, b);
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return compare("gt", BinaryOp::gt, a, b);
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return compare("ge", BinaryOp::ge, a, b);
}
Tensor eq(const Tensor& a, double b) {
  return eq(a, wrap_scalar(b, a));
}
Tensor ne(const Tensor& a, double b) {
  return ne(a, wrap_scalar(b, a));
}
Tensor lt(const Tensor& a, double b) {
  return lt(a, wrap_scalar(b, a));
}
Tensor le(const Tensor& a, double b) {
  return le(a, wrap_scalar(b, a));
}
Tensor gt(const Tensor& a, double b) {
  return gt(a, wrap_scalar(b, a));
}
Tensor ge(const Tensor& a, double b) {
  return ge(a, wrap_scalar(b, a));
}

Tensor logical_not(const Tensor& x) {
  return unary_forward("logical_not", UnaryOp::logical_not, x, x.dtype(), DType::boolean);
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return compare("logical_and", BinaryOp::logical_and, a, b);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return compare("logical_or", BinaryOp::logical_or, a, b);
}
Tensor isnan(const Tensor& x) {
  return unary_forward("isnan", UnaryOp::isnan, x, x.dtype(), DType::boolean);
}

namespace {
struct WhereBackward : BinaryNode {
  SavedTensor condition;
  std::string name() const override { return "WhereBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor c = condition.unpack(*this);
    Tensor zero = zeros({}, g.dtype(), g.device());
    return reduce(wants(0) ? where(c, g, zero) : Tensor(), wants(1) ? where(c, zero, g) : Tensor());
  }
  void release_saved() override { condition.reset(); }
};
}  // namespace

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  profiler::OpScope profile("where", {&condition, &a, &b});
  const char* op = "where";
  require_defined(op, condition, "condition");
  DType t = arithmetic_type(op, a, b);
  KILN_CHECK(condition.dtype() == DType::boolean, DTypeError,
             "where: expected a bool condition, got {}; compare first (e.g. gt(x, 0))",
             describe(condition));
  Device device = common_device(op, {&condition, &a, &b});
  Shape shape = broadcast_shapes(op, broadcast_shapes(op, condition.shape(), a.shape()), b.shape());
  const MemoryFormat format = result_format(shape, {&condition, &a, &b});
  Tensor out = empty(shape, t, device, format);
  Tensor cc = condition.detach().expand(shape);
  Tensor ca = a.detach().to(t).expand(shape), cb = b.detach().to(t).expand(shape);
  kernels_for<ElementwiseKernels>("where", device)
      .where(in_memory_order(cc, format), in_memory_order(ca, format), in_memory_order(cb, format),
             in_memory_order(out, format));
  if (should_record({&a, &b})) {
    auto node = std::make_shared<WhereBackward>();
    node->condition = SavedTensor(condition);
    node->remember(a, b);
    record(out, node, {&a, &b});
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  profiler::OpScope profile("masked_fill", {&x, &mask});
  require_defined("masked_fill", x);
  require_defined("masked_fill", mask, "mask");
  KILN_CHECK(mask.dtype() == DType::boolean, DTypeError,
             "masked_fill: expected a bool mask, got {}", describe(mask));
  Shape shape = broadcast_shapes("masked_fill", x.shape(), mask.shape());
  KILN_CHECK(shape == x.shape(), ShapeError,
             "masked_fill: mask {} must broadcast to the input's shape {}", shape_str(mask.shape()),
             shape_str(x.shape()));
  return where(mask, scalar_tensor(value, x.dtype(), x.device()), x);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  KILN_CHECK(a.shape() == b.shape(), ShapeError, "allclose: shapes {} and {} differ",
             shape_str(a.shape()), shape_str(b.shape()));
  std::vector<double> va = a.tolist(), vb = b.tolist();
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) {
      if (equal_nan && std::isnan(va[i]) && std::isnan(vb[i])) continue;
      return false;
    }
    if (va[i] == vb[i]) continue;  // equal infinities
    // rtol * |inf| would excuse any difference from an infinity.
    if (std::isinf(va[i]) || std::isinf(vb[i])) return false;
    if (!(std::abs(va[i] - vb[i]) <= atol + rtol * std::abs(vb[i]))) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  return a.tolist() == b.tolist();
}

// ---- operators ----

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator-(const Tensor& x) {
  return neg(x);
}
Tensor operator+(const Tensor& a, double b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, double b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, double b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, double b) {
  return div(a, b);
}
Tensor operator+(double a, const Tensor& b) {
  return add(b, a);
}
Tensor operator-(double a, const Tensor& b) {
  return rsub(a, b);
}
Tensor operator*(double a, const Tensor& b) {
  return mul(b, a);
}
Tensor operator/(double a, const Tensor& b) {
  return rdiv(a, b);
}
Tensor operator==(const Tensor& a, const Tensor& b) {
  return eq(a, b);
}
Tensor operator!=(const Tensor& a, const Tensor& b) {
  return ne(a, b);
}
Tensor operator==(const Tensor& a, double b) {
  return eq(a, b);
}
Tensor operator!=(const Tensor& a, double b) {
  return ne(a, b);
}
Tensor operator==(double a, const Tensor& b) {
  return eq(b, a);
}
Tensor operator!=(double a, const Tensor& b) {
  return ne(b, a);
}
Tensor operator<(const Tensor& a, const Tensor& b) {
  return lt(a, b);
}
Tensor operator<=(const Tensor& a, const Tensor& b) {
  return le(a, b);
}
Tensor operator>(const Tensor& a, const Tensor& b) {
  return gt(a, b);
}
Tensor operator>=(const Tensor& a, const Tensor& b) {
  return ge(a, b);
}
Tensor operator<(const Tensor& a, double b) {
  return lt(a, b);
}
Tensor operator<=(const Tensor& a, double b) {
  return le(a, b);
}
Tensor operator>(const Tensor& a, double b) {
  return gt(a, b);
}
Tensor operator>=(const Tensor& a, double b) {
  return ge(a, b);
}

}  // namespace kiln
