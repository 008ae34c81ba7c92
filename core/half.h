// 16-bit floating-point storage types shared by host and device code.
// Conversions are pure bit manipulation so CPU and CUDA kernels round
// identically without depending on cuda_fp16.h.
#pragma once

#include <cstdint>

#ifndef KILN_HOST_DEVICE
#ifdef __CUDACC__
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
#endif

namespace kiln {
namespace detail {

// __builtin_memcpy works in both g++ and nvcc device code and, unlike a
// union, is well-defined type punning.
KILN_HOST_DEVICE inline uint32_t float_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
}

KILN_HOST_DEVICE inline float bits_float(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

// Drops the low `shift` bits of v, rounding to nearest with ties to even.
// A carry out of the kept bits is intentional: it bumps the exponent field.
KILN_HOST_DEVICE inline uint32_t shift_round_even(uint32_t v, int shift) {
  uint32_t kept = v >> shift;
  uint32_t rest = v & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1u))) ++kept;
  return kept;
}

}  // namespace detail

// IEEE 754 binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
struct Half {
  uint16_t bits = 0;

  Half() = default;

  KILN_HOST_DEVICE Half(float f) {
    uint32_t u = detail::float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t mant = u & 0x7fffffu;

    if (exp == 0xffu) {
      // Force the quiet bit: truncating the payload could otherwise
      // turn a signalling NaN into infinity.
      bits = static_cast<uint16_t>(mant ? sign | 0x7e00u | (mant >> 13) : sign | 0x7c00u);
      return;
    }
    int e = static_cast<int>(exp) - 127 + 15;
    if (e >= 31) {
      bits = static_cast<uint16_t>(sign | 0x7c00u);
      return;
    }
    if (e <= 0) {
      // Below 2^-25 even the tie rounds to zero (0 is even), so only
      // exponents down to -10 can produce a nonzero subnormal.
      if (e < -10) {
        bits = static_cast<uint16_t>(sign);
        return;
      }
      // Restore the implicit bit and scale to units of 2^-24; a
      // round-up to 0x400 lands exactly on the smallest normal.
      uint32_t m = detail::shift_round_even(mant | 0x800000u, 14 - e);
      bits = static_cast<uint16_t>(sign | m);
      return;
    }
    // Rounding exponent and mantissa together lets a mantissa carry
    // propagate into the exponent, and from 30 into 31 (infinity).
    uint32_t h = detail::shift_round_even((static_cast<uint32_t>(e) << 23) | mant, 13);
    bits = static_cast<uint16_t>(sign | h);
  }

  KILN_HOST_DEVICE operator float() const {
    uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    uint32_t exp = (bits >> 10) & 0x1fu;
    uint32_t mant = bits & 0x3ffu;

    if (exp == 0x1fu) return detail::bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
      if (mant == 0) return detail::bits_float(sign);
      // Every half subnormal is a normal float: renormalise.
      int e = -14;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --e;
      }
      mant &= 0x3ffu;
      return detail::bits_float(sign | (static_cast<uint32_t>(e + 127) << 23) | (mant << 13));
    }
    return detail::bits_float(sign | ((exp - 15u + 127u) << 23) | (mant << 13));
  }

  KILN_HOST_DEVICE static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

// bfloat16: the top 16 bits of a float (1 sign, 8 exponent, 7 mantissa).
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;

  KILN_HOST_DEVICE BFloat16(float f) {
    uint32_t u = detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      // Truncation could clear every payload bit and yield infinity,
      // so keep the NaN quiet explicitly.
      bits = static_cast<uint16_t>((u >> 16) | 0x0040u);
      return;
    }
    // Adding 0x7fff plus the lowest kept bit rounds ties to even; the
    // carry may run into the exponent, which correctly overflows the
    // largest finite values to infinity.
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<uint16_t>(u >> 16);
  }

  KILN_HOST_DEVICE operator float() const {
    return detail::bits_float(static_cast<uint32_t>(bits) << 16);
  }

  KILN_HOST_DEVICE static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

}  // namespace kiln
