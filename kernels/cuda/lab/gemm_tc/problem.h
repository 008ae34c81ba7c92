// What every hand-written tensor-core version checks before it launches.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/kernels/cuda/lab/gemm_tc/tiling.h"

namespace kiln::lab::gemm_tc {

inline void check_problem(const char* version, const void* a, const void* b, const float* c,
                          DType dtype, int64_t m, int64_t n, int64_t k, const Grid& g) {
  const std::string where = std::string("lab gemm_tc ") + version + ": ";
  if (dtype != DType::bf16 && dtype != DType::f16)
    throw DTypeError(where + "the inputs must be bf16 or f16, got " + dtype_name(dtype));
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (m > kIntMax || n > kIntMax || k > kIntMax || !fits(g))
    throw ShapeError(where + "m, n and k must be below 2^31, with at most 65535 block rows");
  if (!supported(n, k))
    throw ShapeError(where + "n = " + std::to_string(n) + " and k = " + std::to_string(k) +
                     " must be multiples of 8: the kernel copies rows in 16-byte pieces");
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  if (!aligned(a, 16) || !aligned(b, 16) || !aligned(c, 8))
    throw ValueError(where + "A and B must start on 16 bytes and C on 8");
}

}  // namespace kiln::lab::gemm_tc
