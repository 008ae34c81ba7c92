// The matrix-product family, on every device: oneDNN and Eigen on the CPU (kernels/cpu/matmul.cpp),
// cuBLAS on the GPU (kernels/cuda/matmul.cpp). The BLAS-style gemm on raw buffers that conv2d
// builds on stays inside each device's folder (kernels/cpu/gemm.h, kernels/cuda/gemm.h).
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

struct MatmulKernels {
  // out[i] = a[i] b[i] (or += when accumulate) for every batch index i: a is [..., n, k], b is
  // [..., k, m], both with out's batch dims (batch strides may be 0, as after expand), out is a
  // contiguous [..., n, m], all of one dtype. Each matrix of a and b must be row- or
  // column-major (as_gemm_operand makes it so).
  void (*batched_matmul)(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate);
  // t itself when each of its matrices (last two dims) is row- or column-major, else a
  // contiguous copy: transposed views reach the library without a copy.
  Tensor (*as_gemm_operand)(const Tensor& t);
  // Whether f16 and bf16 operands go in as they are (cuBLAS, and the CPU's oneDNN for bf16, both
  // accumulating in f32; the CPU makes f32 copies itself where oneDNN does not take a product)
  // rather than as f32 copies made by the op.
  bool takes_half;

  static const MatmulKernels cpu;
  static const MatmulKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
