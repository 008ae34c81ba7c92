// The portable conversions of convert.h, and the choice among the versions.
#include "kiln/kernels/cpu/convert/convert.h"

#include <cstdint>

#include "kiln/core/half.h"

namespace kiln::cpu {

namespace {

// BFloat16's rounding written without a branch, so the compiler vectorises it for any target.
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    __builtin_memcpy(&u, src + i, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x0040u;
    dst[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t{src[i]} << 16;
    __builtin_memcpy(dst + i, &u, sizeof u);
  }
}

void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Half(src[i]).bits;
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(Half::from_bits(src[i]));
}

}  // namespace

const ConvertKernels convert_kernels_baseline{.isa = CpuIsa::baseline,
                                              .f32_to_bf16 = f32_to_bf16,
                                              .bf16_to_f32 = bf16_to_f32,
                                              .f32_to_f16 = f32_to_f16,
                                              .f16_to_f32 = f16_to_f32};

const ConvertKernels& convert_kernels(CpuIsa isa) {
#if defined(__x86_64__)
  if (isa >= CpuIsa::avx512) return convert_kernels_avx512;
  if (isa >= CpuIsa::avx2) return convert_kernels_avx2;
#endif
  return convert_kernels_baseline;
}

}  // namespace kiln::cpu
