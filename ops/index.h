// Joining, splitting and indexing.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Views of size `split_size` along dim (the last may be smaller).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// index: 1-D i32/i64.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j] = x[i][index[i][j]] for dim 1 (and likewise for any dim); index has x's ndim.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// out = self, then out[i][index[i][j]] += src[i][j] for dim 1 (and likewise for any dim).
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// out = self, then out.select(dim, index[i]) += src.select(dim, i).
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// i64 labels -> i64 one-hot with a new last dim; num_classes -1 takes max(labels) + 1.
Tensor one_hot(const Tensor& labels, int64_t num_classes = -1);
// Rows of weight [num, dim] picked by integer indices of any shape; rows at padding_idx get no
// gradient (padding_idx -1: none).
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);

}  // namespace kiln
