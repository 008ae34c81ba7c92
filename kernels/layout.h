// Layouts that kernels make for themselves: views built from core's make_tensor, and contiguous
// copies made with a device's own copy kernel. Tensor's view and copy methods are ops (they
// record autograd nodes), a floor above the kernels, so kernels do not call them.
#pragma once

#include <algorithm>
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

// A contiguous tensor seen as [outer, size(dim), inner].
struct Folded {
  int64_t outer = 1, size = 1, inner = 1;
};

inline Folded fold_at(const Shape& shape, int64_t dim) {
  Folded f;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim)
      f.outer *= shape[d];
    else if (d > dim)
      f.inner *= shape[d];
  }
  f.size = shape[dim];
  return f;
}

// How one matrix (the last two dims) of a tensor reaches a BLAS gemm, Eigen's or cuBLAS's:
// transposed or not, and its leading dimension. !ok: no gemm can read it as it is, copy it.
struct GemmLayout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 1;
};

inline GemmLayout gemm_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  // Size-1 dims have free strides; a zero stride elsewhere (an expanded matrix) is not a layout
  // a BLAS can read, and needs a copy.
  if ((cols <= 1 || col_stride == 1) && (rows <= 1 || row_stride >= std::max<int64_t>(cols, 1)))
    return {true, false, rows <= 1 ? std::max<int64_t>(cols, 1) : row_stride};
  if ((rows <= 1 || row_stride == 1) && (cols <= 1 || col_stride >= std::max<int64_t>(rows, 1)))
    return {true, true, cols <= 1 ? std::max<int64_t>(rows, 1) : col_stride};
  return {};
}

inline GemmLayout matrix_layout(const Tensor& t) {
  const int64_t d = t.dim();
  return gemm_layout(t.shape()[d - 2], t.shape()[d - 1], t.strides()[d - 2], t.strides()[d - 1]);
}

}  // namespace kiln
