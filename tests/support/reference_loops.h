// What the tests' plain-loop references share: row-major index arithmetic, the groups of elements
// a reduction folds, and parameters made from literal values. Each test computes its expected
// values from these with loops over doubles, independent of the kernels under test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::testing {

// The row-major offset of a multi-index.
inline int64_t offset_of(const Shape& shape, const Shape& index) {
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d) offset = offset * shape[d] + index[d];
  return offset;
}

// The multi-index of a row-major offset.
inline Shape index_of(const Shape& shape, int64_t offset) {
  Shape index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = offset % shape[d];
    offset /= shape[d];
  }
  return index;
}

// Which dims a reduction over `dims` folds (all of them when dims is empty); negative dims count
// from the end.
inline std::vector<bool> reduced_mask(const Dims& dims, int64_t ndim) {
  std::vector<bool> reduced(ndim, dims.empty());
  for (int64_t d : dims) reduced[d < 0 ? d + ndim : d] = true;
  return reduced;
}

// The elements each output of a reduction folds, outputs and members both in row-major order.
inline std::vector<std::vector<double>> groups_of(const Tensor& x,
                                                  const std::vector<bool>& reduced) {
  const Shape& shape = x.shape();
  const int64_t ndim = x.dim();
  int64_t outputs = 1;
  for (int64_t d = 0; d < ndim; ++d)
    if (!reduced[d]) outputs *= shape[d];
  std::vector<std::vector<double>> groups(outputs);
  const std::vector<double> values = x.tolist();
  for (int64_t flat = 0; flat < static_cast<int64_t>(values.size()); ++flat) {
    int64_t rest = flat, out = 0, out_stride = 1;
    for (int64_t d = ndim - 1; d >= 0; --d) {
      const int64_t index = rest % shape[d];
      rest /= shape[d];
      if (!reduced[d]) out += index * out_stride, out_stride *= shape[d];
    }
    groups[out].push_back(values[flat]);
  }
  return groups;
}

// A leaf parameter holding `values`, for the optimizer tests.
inline Tensor param(const std::vector<double>& values, DType dtype = DType::f64) {
  Tensor p = tensor(values).to(dtype);
  p.requires_grad_();
  return p;
}

}  // namespace kiln::testing
