// CPU joining and indexing kernels. Entry points (ops/index.cpp, ops/gather_scatter.cpp)
// check shapes and dtypes, convert indices to i64 and check every index is in range before
// calling these, so a kernel never writes past a tensor and never fails half way.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::cpu {

// Copies inputs[i] into out's window along dim, one after the other, converting to out's dtype.
void cat(const std::vector<Tensor>& inputs, int64_t dim, const Tensor& out);

// out = x.index_select(dim, index): x and out contiguous, index i64 contiguous and in range.
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);

// out[..., j, ...] = x[..., index[..., j, ...], ...] along dim; out contiguous with index's shape,
// x any strides, index i64.
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);

// out[..., index[..., j, ...], ...] += src[..., j, ...] along dim; out contiguous, src any strides.
void scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);

// out.select(dim, index[i]) += src.select(dim, i); out and src contiguous, index i64 contiguous.
void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);

// out[..., labels[...]] = 1; out is a zeroed contiguous i64 tensor of labels' shape + [classes].
void one_hot(const Tensor& labels, const Tensor& out);

}  // namespace kiln::cpu
