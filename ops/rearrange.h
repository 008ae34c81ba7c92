// Rearranging ops, as torch's: flip, roll, repeat, tile, tril and triu, composed of views,
// index_select, cat and where, so they run on every device and dtype those take and their
// gradients are the composition's; and the boolean reductions all and any.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// The elements in reverse order along each of dims.
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);
// Shifted by shifts[i] along dims[i], wrapping around; with no dims, over the flattened tensor
// (and the original shape kept), as torch.roll.
Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts,
            const std::vector<int64_t>& dims = {});
// x tiled repeats[i] times along dim i (repeats may have more dims than x: new leading dims).
Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats);
// repeat, with repeats padded by leading 1s to x's dims when shorter (torch.tile).
Tensor tile(const Tensor& x, std::vector<int64_t> repeats);
// The lower (tril) or upper (triu) triangle of the last two dims, from diagonal k; zeros elsewhere.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// Whether every (all) or some (any) element is nonzero, over dims (every dim when empty): bool.
Tensor all(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

}  // namespace kiln
