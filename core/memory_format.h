// Memory formats: the order in which a 4-D [N, C, H, W] tensor's elements lie in memory, as
// PyTorch's torch.memory_format. The shape stays [N, C, H, W] in every format; only the strides
// differ. channels_last is NHWC in memory (C fastest), the layout tensor cores read without a
// transpose. A format is a property of the strides, read back by suggest_memory_format().
#pragma once

#include "kiln/core/shape.h"

namespace kiln {

enum class MemoryFormat {
  contiguous,     // row-major in the order of the dims (NCHW for 4-D tensors)
  channels_last,  // 4-D only: N, then H, then W, then C fastest
  preserve,       // the format the source tensor suggests (for copies and *_like factories)
};

const char* memory_format_name(MemoryFormat format);

// The strides of a new dense tensor of `shape` in `format` (contiguous or channels_last; `op`
// names the caller in the error for channels_last with other than 4 dims, or for preserve).
Shape strides_for(const char* op, const Shape& shape, MemoryFormat format);

// Whether `strides` walk `shape` densely in channels-last order, with PyTorch's tie-breaks for
// size-1 dims: the strides of a size-1 dim carry the format (a [N, 1, H, W] tensor made channels
// last has C's stride 1, a contiguous one H * W), and ambiguous cases fall back to contiguous. The
// rule torch uses for suggest_memory_format (is_channels_last_strides_2d_s4).
bool is_channels_last_strides(const Shape& shape, const Shape& strides);

// Whether the elements of `shape` at `strides` are laid out densely in `format`: for
// channels_last, C, W, H, N from fastest to slowest, ignoring size-1 dims (as is_contiguous).
bool is_dense_in(const Shape& shape, const Shape& strides, MemoryFormat format);

}  // namespace kiln
