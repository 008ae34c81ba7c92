// Pair: a 2-D window's two sizes (kernel, stride, padding, dilation), as conv2d and the pools take
// them.
#pragma once

#include <array>
#include <cstdint>

namespace kiln {

// Height then width. One integer means both, as in PyTorch: max_pool2d(x, 2) and
// conv2d(x, w, b, /*stride=*/2) take Pair{2} == Pair{2, 2}.
struct Pair : std::array<int64_t, 2> {
  Pair() : std::array<int64_t, 2>{0, 0} {}
  Pair(int64_t both) : std::array<int64_t, 2>{both, both} {}  // NOLINT: implicit, as PyTorch's int
  Pair(int64_t height, int64_t width) : std::array<int64_t, 2>{height, width} {}
};

}  // namespace kiln
