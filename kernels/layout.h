// Layouts that kernels make for themselves: views built from core's make_tensor, and contiguous
// copies made with a device's own copy kernel. Tensor's view and copy methods are ops (they
// record autograd nodes), a floor above the kernels, so kernels do not call them.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/kernels/copy.h"

namespace kiln {

// x with its dims in `order` (a permutation), sharing x's storage.
inline Tensor permuted_view(const Tensor& x, const std::vector<int64_t>& order) {
  Shape shape, strides;
  for (int64_t d : order) shape.push_back(x.shape()[d]), strides.push_back(x.strides()[d]);
  return make_tensor(x.storage(), shape, strides, x.offset(), x.dtype());
}

// Elements [start, start + length) of x along dim, sharing x's storage.
inline Tensor narrowed_view(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  Shape shape = x.shape();
  shape[dim] = length;
  return make_tensor(x.storage(), shape, x.strides(), x.offset() + start * x.strides()[dim],
                     x.dtype());
}

// A contiguous x seen with another shape of as many elements, sharing its storage.
inline Tensor reshaped_contiguous(const Tensor& x, const Shape& shape) {
  return make_tensor(x.storage(), shape, contiguous_strides(shape), x.offset(), x.dtype());
}

// x itself when contiguous, else a contiguous copy in `dtype` made by `copy` (the kernels of x's
// device): the copy kernel converts as it goes.
inline Tensor contiguous_with(const CopyKernels& copy, const Tensor& x, DType dtype) {
  if (x.is_contiguous() && x.dtype() == dtype) return x;
  Tensor out = empty(x.shape(), dtype, x.device());
  copy.copy(x, out);
  return out;
}
inline Tensor contiguous_with(const CopyKernels& copy, const Tensor& x) {
  return contiguous_with(copy, x, x.dtype());
}

// x with the dims where reduced[d] is true moved last, made contiguous, viewed as
// [outer, inner]: each output of a reduction then reduces one contiguous row.
inline Tensor reduced_last_2d(const CopyKernels& copy, const Tensor& x,
                              const std::vector<bool>& reduced) {
  std::vector<int64_t> order;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!reduced[d]) order.push_back(d), outer *= x.shape()[d];
  for (int64_t d = 0; d < x.dim(); ++d)
    if (reduced[d]) order.push_back(d), inner *= x.shape()[d];
  return reshaped_contiguous(contiguous_with(copy, permuted_view(x, order)), {outer, inner});
}

}  // namespace kiln
