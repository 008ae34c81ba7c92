// The scan family: running sums and products along one dim, on every device (kernels/cpu/scan.cpp,
// kernels/cuda/scan.cu).
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

struct ScanKernels {
  // out = the running sum of x along dim, from the last element backwards when `reverse`. x may
  // be strided and has at least one dim; out has x's shape. Floating sums accumulate in double on
  // the CPU (the accumulation type on the GPU), integer ones in i64.
  void (*cumsum)(const Tensor& x, int64_t dim, bool reverse, const Tensor& out);
  // out = the running product of x along dim, accumulated as cumsum accumulates.
  void (*cumprod)(const Tensor& x, int64_t dim, const Tensor& out);
  // out = the gradient of cumprod(x, dim) for the upstream gradient g (x's shape and dtype):
  // out_i = sum over j >= i of g_j * prod over k <= j, k != i of x_k, computed without dividing by
  // x (so zeros in x are exact) as (prod over k < i of x_k) * r_i, r_i = g_i + x_{i+1} * r_{i+1}.
  void (*cumprod_backward)(const Tensor& x, const Tensor& g, int64_t dim, const Tensor& out);

  static const ScanKernels cpu;
  static const ScanKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
