// The sort family: the order of each row, on every device (kernels/cpu/sort.cpp,
// kernels/cuda/sort.cu). The ops (ops/sort.cpp) bring the sorted dim last and contiguous, and take
// the values with gather, so the kernels only rank.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

struct SortKernels {
  // indices[r, i] = the position in row r of x of its i-th element in ascending order (descending:
  // the i-th largest). x is contiguous [rows, n], any dtype; indices is contiguous i64 [rows, n].
  // The sort is stable: equal elements keep their order. NaN sorts above every number (last
  // ascending, first descending), and -0.0 equals 0.0, as torch.sort(stable=True).
  void (*sort_rows)(const Tensor& x, bool descending, const Tensor& indices);

  static const SortKernels cpu;
  static const SortKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
