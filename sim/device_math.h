// Device math that CUDA's host headers leave out (included by sim/cuda_sim.h): the integer and
// float min/max overloads, the reciprocal square roots, the round-to-nearest intrinsics nvcc never
// contracts into an FMA, and the bit counts. Host libm answers the rest (expf, erff, ...), which
// can differ from CUDA's device math by a few ulps.
#pragma once

#include <math.h>

#include <bit>
#include <cmath>
#include <type_traits>

template <class A, class B>
requires std::is_arithmetic_v<A> && std::is_arithmetic_v<B>
constexpr std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>)
    return std::fmin(static_cast<C>(a), static_cast<C>(b));
  else
    return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <class A, class B>
requires std::is_arithmetic_v<A> && std::is_arithmetic_v<B>
constexpr std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>)
    return std::fmax(static_cast<C>(a), static_cast<C>(b));
  else
    return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}

inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline double rsqrt(double x) {
  return 1.0 / std::sqrt(x);
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline double __dmul_rn(double a, double b) {
  return a * b;
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline double __dadd_rn(double a, double b) {
  return a + b;
}
inline int __popc(unsigned x) {
  return std::popcount(x);
}
inline int __popcll(unsigned long long x) {
  return std::popcount(x);
}
inline int __clz(int x) {
  return std::countl_zero(static_cast<unsigned>(x));
}
inline int __ffs(int x) {
  return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1;
}
