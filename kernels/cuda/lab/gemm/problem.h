// What every f32 GEMM version checks before it launches: its kernels index with int (row offsets
// are taken in 64 bits), and its grid must launch.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "kiln/core/error.h"
#include "kiln/kernels/cuda/lab/gemm/tiling.h"

namespace kiln::lab::gemm {

// The largest m, n and k the kernels take: a tile (tiling.h's kMaxTile) below 2^31 - 1. At
// k = 2^31 - 1 itself the k loop's last `t += bk` would wrap negative, and the loop would go on
// reading A out of bounds.
inline constexpr int64_t kMaxExtent = std::numeric_limits<int>::max() - kMaxTile;

inline void check_problem(const char* version, int64_t m, int64_t n, int64_t k, const Grid& g) {
  const std::string what = std::string("lab gemm ") + version + ": m = " + std::to_string(m) +
                           ", n = " + std::to_string(n) + ", k = " + std::to_string(k);
  if (m < 0 || n < 0 || k < 0 || m > kMaxExtent || n > kMaxExtent || k > kMaxExtent)
    throw ShapeError(what + " is out of the kernel's range: each must be between 0 and " +
                     std::to_string(kMaxExtent) + " (2^31 - 1 less a tile)");
  if (!fits(g))
    throw ShapeError(what + " needs " + std::to_string(g.y) +
                     " blocks along the grid's y, more than the 65535 CUDA allows");
}

}  // namespace kiln::lab::gemm
