// The conversions of convert.h with AVX-512, 16 values a step: f16 through vcvtps2ph/vcvtph2ps
// (exact IEEE rounding, as Half), bf16 by BFloat16's integer rounding on 16 lanes. (Not
// vcvtneps2bf16: it flushes subnormal inputs to zero, which BFloat16 does not.)
#include <immintrin.h>

#include <cstdint>

#include "kiln/kernels/cpu/convert/convert.h"

// GCC 12 warns that the intrinsics' own placeholder operand (_mm512_undefined_*) may be used
// uninitialized where they are inlined: a false positive, GCC bug 105593 (fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kiln::cpu::avx512 {

namespace {

// The mask of the first n lanes of 16 (n < 16): the tail of a run goes through the same
// instructions as the rest, masked, instead of a scalar loop (runs are often 7 to 28 long: an
// output row of a convolution, a batch norm row at 7x7).
__mmask16 first_lanes(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}

__m256i bf16_lanes(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lowest_kept = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lowest_kept)), 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet_nan));
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16_lanes(_mm512_loadu_ps(src + i)));
  if (i < n) {
    const __mmask16 tail = first_lanes(n - i);
    _mm256_mask_storeu_epi16(dst + i, tail, bf16_lanes(_mm512_maskz_loadu_ps(tail, src + i)));
  }
}

__m512 bf16_widened(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i,
                     bf16_widened(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  if (i < n) {
    const __mmask16 tail = first_lanes(n - i);
    _mm512_mask_storeu_ps(dst + i, tail, bf16_widened(_mm256_maskz_loadu_epi16(tail, src + i)));
  }
}

void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  convert_kernels_baseline.f32_to_f16(src + i, dst + i, n - i);
}

// vcvtph2ps quiets a signalling NaN; Half keeps it as it is (payload shifted into place), so
// those lanes, magnitudes strictly between 0x7c00 and 0x7e00, take Half's bits.
void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m512i wide = _mm512_cvtepu16_epi32(h);
    const __m512i magnitude = _mm512_and_si512(wide, _mm512_set1_epi32(0x7fff));
    const __mmask16 signalling = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7c00)) &
                                 _mm512_cmplt_epi32_mask(magnitude, _mm512_set1_epi32(0x7e00));
    const __m512i kept = _mm512_or_si512(
        _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(wide, _mm512_set1_epi32(0x8000)), 16),
                        _mm512_set1_epi32(0x7f800000)),
        _mm512_slli_epi32(_mm512_and_si512(wide, _mm512_set1_epi32(0x3ff)), 13));
    const __m512 converted = _mm512_cvtph_ps(h);
    _mm512_storeu_ps(dst + i,
                     _mm512_mask_blend_ps(signalling, converted, _mm512_castsi512_ps(kept)));
  }
  convert_kernels_baseline.f16_to_f32(src + i, dst + i, n - i);
}

}  // namespace

}  // namespace kiln::cpu::avx512

namespace kiln::cpu {

const ConvertKernels convert_kernels_avx512{.isa = CpuIsa::avx512,
                                            .f32_to_bf16 = avx512::f32_to_bf16,
                                            .bf16_to_f32 = avx512::bf16_to_f32,
                                            .f32_to_f16 = avx512::f32_to_f16,
                                            .f16_to_f32 = avx512::f16_to_f32};

}  // namespace kiln::cpu
