// The joining and indexing family, on every device (kernels/cpu/index.cpp,
// kernels/cuda/index.cu). Entry points (ops/index.cpp, ops/gather_scatter.cpp) check shapes and
// dtypes, convert indices to i64 and check every index is in range (first_out_of_range) before
// calling the others, so a kernel never writes past a tensor and never fails half way. On the GPU
// scatter_add_ and index_add_ add with atomics: where several indices hit one element, the last
// bits of a float sum may vary from run to run.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

struct IndexKernels {
  // Copies inputs[i] into out's window along dim, one after the other, converting to out's dtype.
  void (*cat)(const std::vector<Tensor>& inputs, int64_t dim, const Tensor& out);
  // out = x.index_select(dim, index): x and out contiguous, index i64 contiguous and in range.
  void (*index_select)(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
  // out[..., j, ...] = x[..., index[..., j, ...], ...] along dim; out contiguous with index's
  // shape, x any strides, index i64.
  void (*gather)(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
  // out[..., index[..., j, ...], ...] += src[..., j, ...] along dim; out contiguous, src any
  // strides.
  void (*scatter_add_)(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
  // out.select(dim, index[i]) += src.select(dim, i); out and src contiguous, index i64
  // contiguous.
  void (*index_add_)(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
  // out[..., labels[...]] = 1; out is a zeroed contiguous i64 tensor of labels' shape + [classes].
  void (*one_hot)(const Tensor& labels, const Tensor& out);
  // The flat position of the first value of `index` (contiguous i64) outside [0, size), or -1
  // when all are inside. On a GPU the answer comes back to the host: a synchronisation point.
  int64_t (*first_out_of_range)(const Tensor& index, int64_t size);

  static const IndexKernels cpu;
  static const IndexKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
