// One vector type per instruction set, for the kernels written once and compiled per ISA
// (core/cpu_isa.h). A file of variants defines KILN_SIMD as one of KILN_SIMD_BASELINE,
// KILN_SIMD_AVX2 or KILN_SIMD_AVX512 (the portable one when it defines none) and includes this
// header: it opens the namespace
// kiln::cpu::<isa> (KILN_SIMD_NAMESPACE) with Vec, kLanes and the five operations the kernels use.
// Everything a variant file defines sits in that namespace, so two versions of one function never
// share a name: the linker would otherwise keep one of them for every caller, and an AVX-512 copy
// could end up on a machine without AVX-512 (scripts/check-isa-symbols.py checks the library for
// this).
#pragma once

#define KILN_SIMD_BASELINE 1
#define KILN_SIMD_AVX2 2
#define KILN_SIMD_AVX512 3
#define KILN_SIMD_AVX512_BF16 4  // AVX-512's Vec, in a namespace of its own, with -mavx512bf16

#if !defined(KILN_SIMD)
#define KILN_SIMD KILN_SIMD_BASELINE
#endif

#if KILN_SIMD == KILN_SIMD_AVX512_BF16
#if !defined(__AVX512BF16__)
#error "the AVX512-BF16 variants need -mavx512bf16 (CMakeLists.txt)"
#endif
#define KILN_SIMD_NAMESPACE avx512_bf16
#define KILN_SIMD_VEC KILN_SIMD_AVX512
#elif KILN_SIMD == KILN_SIMD_AVX512
#define KILN_SIMD_VEC KILN_SIMD_AVX512
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || \
    !defined(__AVX512VL__) || !defined(__FMA__)
#error "the AVX-512 variants need -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma (CMakeLists.txt)"
#endif
#define KILN_SIMD_NAMESPACE avx512
#elif KILN_SIMD == KILN_SIMD_AVX2
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "the AVX2 variants need -mavx2 -mfma -mf16c (CMakeLists.txt)"
#endif
#define KILN_SIMD_NAMESPACE avx2
#define KILN_SIMD_VEC KILN_SIMD_AVX2
#else
#define KILN_SIMD_NAMESPACE baseline
#define KILN_SIMD_VEC KILN_SIMD_BASELINE
#endif

#if KILN_SIMD_VEC != KILN_SIMD_BASELINE
#include <immintrin.h>
#endif

namespace kiln::cpu::KILN_SIMD_NAMESPACE {

#if KILN_SIMD_VEC == KILN_SIMD_AVX512
using Vec = __m512;
inline constexpr int kLanes = 16;
inline Vec vzero() {
  return _mm512_setzero_ps();
}
inline Vec vbroadcast(float v) {
  return _mm512_set1_ps(v);
}
inline Vec vload(const float* p) {
  return _mm512_loadu_ps(p);
}
inline void vstore(float* p, Vec v) {
  _mm512_storeu_ps(p, v);
}
inline Vec vfma(Vec a, Vec b, Vec c) {
  return _mm512_fmadd_ps(a, b, c);
}
#elif KILN_SIMD_VEC == KILN_SIMD_AVX2
using Vec = __m256;
inline constexpr int kLanes = 8;
inline Vec vzero() {
  return _mm256_setzero_ps();
}
inline Vec vbroadcast(float v) {
  return _mm256_set1_ps(v);
}
inline Vec vload(const float* p) {
  return _mm256_loadu_ps(p);
}
inline void vstore(float* p, Vec v) {
  _mm256_storeu_ps(p, v);
}
inline Vec vfma(Vec a, Vec b, Vec c) {
  return _mm256_fmadd_ps(a, b, c);
}
#else
// Plain arrays of 8 floats: the compiler vectorises them for whatever the target has (SSE2 on any
// x86-64), and the kernels read the same as the wide ones.
inline constexpr int kLanes = 8;
struct Vec {
  float v[kLanes];
};
inline Vec vzero() {
  return Vec{};
}
inline Vec vbroadcast(float x) {
  Vec r;
  for (float& e : r.v) e = x;
  return r;
}
inline Vec vload(const float* p) {
  Vec r;
  for (int i = 0; i < kLanes; ++i) r.v[i] = p[i];
  return r;
}
inline void vstore(float* p, Vec v) {
  for (int i = 0; i < kLanes; ++i) p[i] = v.v[i];
}
inline Vec vfma(Vec a, Vec b, Vec c) {
  for (int i = 0; i < kLanes; ++i) c.v[i] += a.v[i] * b.v[i];
  return c;
}
#endif

}  // namespace kiln::cpu::KILN_SIMD_NAMESPACE
