// Elementwise results keep their operands' memory format, and the kernels see channels-last
// operands in memory order. The kernels coalesce dims in their logical order, so a channels-last
// [N, C, H, W] tensor (NHWC in memory) would take their strided path; viewed as [N, H, W, C] it
// is one contiguous run, and so is every operand laid out like it.
#pragma once

#include <initializer_list>

#include "kiln/core/tensor.h"
#include "kiln/kernels/layout.h"

namespace kiln {

// The format of an elementwise result of `shape`: the first operand of that whole shape decides
// (channels_last if it suggests so), as PyTorch's TensorIterator follows its first full operand's
// strides; contiguous when no operand has the shape or the shape is not 4-D.
inline MemoryFormat result_format(const Shape& shape,
                                  std::initializer_list<const Tensor*> operands) {
  if (shape.size() != 4) return MemoryFormat::contiguous;
  for (const Tensor* t : operands)
    if (t->defined() && t->shape() == shape) return t->suggest_memory_format();
  return MemoryFormat::contiguous;
}

// t as an elementwise kernel should walk it when the result is laid out in `format`: its dims in
// the result's memory order (a view; values and storage unchanged).
inline Tensor in_memory_order(const Tensor& t, MemoryFormat format) {
  return format == MemoryFormat::channels_last ? permuted_view(t, {0, 2, 3, 1}) : t;
}

}  // namespace kiln
