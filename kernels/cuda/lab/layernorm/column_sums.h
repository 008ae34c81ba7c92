// The last step of the layer-norm backward's v2 and v3: dweight and dbias as the sums over blocks
// of the per-block partials the row kernels wrote ([blocks, cols] for dweight, then [blocks, cols]
// for dbias, in the workspace). A thread per column walks the blocks in order, so the result does
// not depend on which block finished first.
#pragma once

#include <cstdint>

namespace kiln::lab::layernorm {

void launch_column_sums(const float* partial, int64_t blocks, int64_t cols, float* dweight,
                        float* dbias);

}  // namespace kiln::lab::layernorm
