// What every f32 GEMM version checks before it launches: its kernels index with int (m, n and k
// below 2^31; row offsets are taken in 64 bits), and its grid must launch.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "kiln/core/error.h"
#include "kiln/kernels/cuda/lab/gemm/tiling.h"

namespace kiln::lab::gemm {

inline void check_problem(const char* version, int64_t m, int64_t n, int64_t k, const Grid& g) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (m < 0 || n < 0 || k < 0 || m > kIntMax || n > kIntMax || k > kIntMax || !fits(g))
    throw ShapeError(std::string("lab gemm ") + version + ": m = " + std::to_string(m) +
                     ", n = " + std::to_string(n) + ", k = " + std::to_string(k) +
                     " is out of the kernel's range (each below 2^31, at most 65535 block rows)");
}

}  // namespace kiln::lab::gemm
