// The elementwise family on the GPU, in three files compiled apart (an edit to one rebuilds it
// alone, and the two cores of a build share them): unary.cu (the unary ops), binary.cu (the binary
// ops) and elementwise.cu (relu's backward, where and the family's kernel table). The math of each
// op lives in UnaryMath / BinaryMath, written on the compute type A exactly as in
// kernels/cpu/elementwise.cpp (same formulas, same NaN behaviour); cuda::elementwise (loops.cuh)
// splits the work, a thread per element (or per 16-byte vector of them) in a grid-stride loop, and
// picks the vectorised, contiguous or strided kernel. Each op is its own template instance, so the
// per-element code has no switch.
#pragma once

#include "kiln/core/tensor.h"
#include "kiln/kernels/elementwise.h"

namespace kiln::cuda {

// ElementwiseKernels' unary and binary entries for CUDA tensors (unary.cu, binary.cu).
void unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams params);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);

// A list of ops as template arguments, which unary.cu and binary.cu expand into one instance of
// their kernels per op.
template <auto... kOps>
struct OpList {};

}  // namespace kiln::cuda
