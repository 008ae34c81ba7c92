// What every hand-written tensor-core version checks before it launches.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "kiln/core/cuda.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/kernels/cuda/lab/gemm_tc/tiling.h"

namespace kiln::lab::gemm_tc {

inline void check_problem(const char* version, const void* a, const void* b, const float* c,
                          DType dtype, int64_t m, int64_t n, int64_t k, const Grid& g) {
  const std::string where = std::string("lab gemm_tc ") + version + ": ";
  if (dtype != DType::bf16 && dtype != DType::f16)
    throw DTypeError(where + "the inputs must be bf16 or f16, got " + dtype_name(dtype));
  // A tile (tiling.h's kMaxTile) below 2^31 - 1: the kernels' int indices run up to a tile past
  // the problem's edge, and at k = 2^31 - 1 v2's count of k tiles, (k + bk - 1) / bk, would wrap
  // negative and leave C unwritten.
  constexpr int64_t kMaxExtent = std::numeric_limits<int>::max() - kMaxTile;
  if (m < 0 || n < 0 || k < 0 || m > kMaxExtent || n > kMaxExtent || k > kMaxExtent)
    throw ShapeError(where + "m = " + std::to_string(m) + ", n = " + std::to_string(n) + ", k = " +
                     std::to_string(k) + " is out of range: each must be between 0 and " +
                     std::to_string(kMaxExtent) + " (2^31 - 1 less a tile)");
  if (!fits(g))
    throw ShapeError(where + "m = " + std::to_string(m) + " needs " + std::to_string(g.y) +
                     " block rows, more than the 65535 a grid's y allows");
  if (!supported(n, k))
    throw ShapeError(where + "n = " + std::to_string(n) + " and k = " + std::to_string(k) +
                     " must be multiples of 8: the kernel copies rows in 16-byte pieces");
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  if (!aligned(a, 16) || !aligned(b, 16) || !aligned(c, 8))
    throw ValueError(where + "A and B must start on 16 bytes and C on 8");
}

// The hand-written versions use Ampere's instructions (mma.cuh), which a Turing GPU (sm_75: RTX
// 20, T4) does not have; its code for them is a trap, so they refuse before launching.
inline void check_device(const char* version) {
  const std::string where = std::string("lab gemm_tc ") + version + ": ";
  const int device = cuda::current_device();
  const cuda::DeviceProperties gpu = cuda::get_device_properties(device);
  if (gpu.major < 8)
    throw NotImplementedError(
        where + "needs compute capability 8.0 or newer (ldmatrix, mma.sync.m16n8k16 in bf16 and " +
        "f16, cp.async: Ampere's instructions); cuda:" + std::to_string(device) + " (" + gpu.name +
        ") is " + std::to_string(gpu.major) + "." + std::to_string(gpu.minor) +
        ". v0_cublaslt runs there");
}

}  // namespace kiln::lab::gemm_tc
