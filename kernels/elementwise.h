// The elementwise family: unary and binary ops, relu's backward and where, on every device
// (kernels/cpu/elementwise.cpp, kernels/cuda/elementwise/). Inputs arrive already converted to
// the compute dtype and expanded to the output's shape (ops/elementwise.cpp does that); any
// operand may be strided. Every dtype; the 16-bit floats compute in f32.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

enum class UnaryOp {
  neg,
  abs,
  sign,
  exp,
  log,
  sqrt,
  rsqrt,
  square,
  reciprocal,
  erf,
  sin,
  cos,
  relu,
  leaky_relu,
  sigmoid,
  tanh,
  gelu,
  gelu_tanh,
  silu,
  clamp,
  pow_scalar,
  logical_not,
  isnan,
  floor,
  ceil,
  round,  // half to even, as torch.round
  trunc
};

// Extra arguments: leaky_relu's slope (a), clamp's bounds (a, b), pow_scalar's exponent (a).
struct UnaryParams {
  double a = 0.0;
  double b = 0.0;
};

enum class BinaryOp {
  add,
  sub,
  mul,
  div,
  pow,
  maximum,
  minimum,
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
  logical_and,
  logical_or
};

struct ElementwiseKernels {
  // out has x's dtype, except logical_not and isnan, whose out is bool.
  void (*unary)(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams params);
  // out = a (op) b; for add and sub, b is scaled by alpha. Comparisons and logical ops write bool.
  void (*binary)(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);
  // out = output <= 0 ? 0 : grad (so NaN passes): relu's backward from its saved output, in one
  // pass. grad and output have out's shape and dtype; grad may be strided.
  void (*relu_backward)(const Tensor& grad, const Tensor& output, const Tensor& out);
  // out = condition ? a : b; condition is bool, a and b have out's dtype.
  void (*where)(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out);

  static const ElementwiseKernels cpu;
  static const ElementwiseKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
