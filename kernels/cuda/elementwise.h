// CUDA elementwise kernels, the twins of kernels/cpu/elementwise.h (same ops, dtypes and
// signatures). Inputs arrive converted to the compute dtype and expanded to the output's shape;
// operands may be strided. Every dtype the CPU kernel takes; f16/bf16 compute in f32.
#pragma once

#include "kiln/core/tensor.h"
#include "kiln/kernels/cpu/elementwise.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA
void unary(cpu::UnaryOp op, const Tensor& x, const Tensor& out, cpu::UnaryParams params = {});
void binary(cpu::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
            double alpha = 1.0);
void relu_backward(const Tensor& grad, const Tensor& output, const Tensor& out);
void where(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out);
#else
[[noreturn]] inline void unary(cpu::UnaryOp, const Tensor&, const Tensor&, cpu::UnaryParams = {}) {
  not_built("unary");
}
[[noreturn]] inline void binary(cpu::BinaryOp, const Tensor&, const Tensor&, const Tensor&,
                                double = 1.0) {
  not_built("binary");
}
[[noreturn]] inline void relu_backward(const Tensor&, const Tensor&, const Tensor&) {
  not_built("relu_backward");
}
[[noreturn]] inline void where(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  not_built("where");
}
#endif

}  // namespace kiln::gpu
