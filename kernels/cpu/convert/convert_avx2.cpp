// The conversions of convert.h with AVX2 and F16C, 8 values a step: f16 through the F16C
// instructions (exact IEEE rounding, as Half), bf16 by BFloat16's integer rounding on 8 lanes.
#include <immintrin.h>

#include <cstdint>

#include "kiln/kernels/cpu/convert/convert.h"

namespace kiln::cpu::avx2 {

namespace {

// 8 floats to bf16 (in the low 16 bits of each 32-bit lane).
__m256i bf16_lanes(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lowest_kept = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lowest_kept)), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i lanes = bf16_lanes(_mm256_loadu_ps(src + i));
    // Packs the 8 low halves: packus per 128-bit half, then the two 64-bit results together.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lanes, lanes), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
  }
  convert_kernels_baseline.f32_to_bf16(src + i, dst + i, n - i);
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
  convert_kernels_baseline.bf16_to_f32(src + i, dst + i, n - i);
}

void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  convert_kernels_baseline.f32_to_f16(src + i, dst + i, n - i);
}

// vcvtph2ps quiets a signalling NaN; Half keeps it as it is (payload shifted into place), so
// those lanes, magnitudes strictly between 0x7c00 and 0x7e00, take Half's bits.
void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i wide = _mm256_cvtepu16_epi32(h);
    const __m256i magnitude = _mm256_and_si256(wide, _mm256_set1_epi32(0x7fff));
    const __m256i signalling =
        _mm256_and_si256(_mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7c00)),
                         _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7e00), magnitude));
    const __m256i kept = _mm256_or_si256(
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(wide, _mm256_set1_epi32(0x8000)), 16),
                        _mm256_set1_epi32(0x7f800000)),
        _mm256_slli_epi32(_mm256_and_si256(wide, _mm256_set1_epi32(0x3ff)), 13));
    const __m256 converted = _mm256_cvtph_ps(h);
    _mm256_storeu_ps(dst + i, _mm256_blendv_ps(converted, _mm256_castsi256_ps(kept),
                                               _mm256_castsi256_ps(signalling)));
  }
  convert_kernels_baseline.f16_to_f32(src + i, dst + i, n - i);
}

}  // namespace

}  // namespace kiln::cpu::avx2

namespace kiln::cpu {

const ConvertKernels convert_kernels_avx2{.isa = CpuIsa::avx2,
                                          .f32_to_bf16 = avx2::f32_to_bf16,
                                          .bf16_to_f32 = avx2::bf16_to_f32,
                                          .f32_to_f16 = avx2::f32_to_f16,
                                          .f16_to_f32 = avx2::f16_to_f32};

}  // namespace kiln::cpu
