// What every hand-written attention version checks before it launches.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "kiln/core/cuda.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/kernels/cuda/lab/attention/tiling.h"

namespace kiln::lab::attention {

// Shapes every version takes: a head dimension of 1 to kMaxHeadDim, at least one key where there
// are queries (a softmax over no key is 0 / 0), no negative extent.
inline void check_shape(const char* version, int64_t batch_heads, int64_t l, int64_t s, int64_t d) {
  const std::string where = std::string("lab attention ") + version + ": ";
  if (batch_heads < 0 || l < 0 || s < 0)
    throw ShapeError(where + "batch_heads = " + std::to_string(batch_heads) + ", l = " +
                     std::to_string(l) + ", s = " + std::to_string(s) + " must not be negative");
  // The tiled kernels index a head's rows in int, up to a tile past its edge.
  constexpr int64_t kMaxExtent = std::numeric_limits<int>::max() - 1024;
  if (l > kMaxExtent || s > kMaxExtent)
    throw ShapeError(where + "l = " + std::to_string(l) + " and s = " + std::to_string(s) +
                     " must be at most " + std::to_string(kMaxExtent));
  if (d < 1 || d > kMaxHeadDim)
    throw ShapeError(where + "the head dimension must be between 1 and " +
                     std::to_string(kMaxHeadDim) + ", got " + std::to_string(d));
  if (s == 0 && l > 0 && batch_heads > 0)
    throw ShapeError(where + "l = " + std::to_string(l) +
                     " queries and no key: the softmax of an empty row is 0 / 0");
}

inline void check_f32(const char* version, DType dtype) {
  if (dtype != DType::f32)
    throw DTypeError(std::string("lab attention ") + version + ": takes f32 inputs, got " +
                     dtype_name(dtype) + " (v4_mma_fa2 takes bf16 and f16)");
}

}  // namespace kiln::lab::attention
