// Philox4x32-10 counter-based RNG (Salmon et al., "Parallel Random Numbers:
// As Easy as 1, 2, 3", SC 2011; Random123). Stateless, so element i of a
// random tensor can be produced independently on any thread, and the CPU and
// CUDA paths share this one implementation to yield identical streams.
#pragma once

#include <cmath>
#include <cstdint>

#include "half.h"  // KILN_HOST_DEVICE

namespace kiln {

struct PhiloxCounter {
  uint32_t x[4];
};

struct PhiloxKey {
  uint32_t k[2];
};

namespace detail {

// A 64-bit product gives mulhi/mullo portably, without __umulhi or
// compiler-specific 128-bit types.
KILN_HOST_DEVICE inline void philox_round(PhiloxCounter& c, const PhiloxKey& key) {
  uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c.x[0];
  uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c.x[2];
  uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  c = PhiloxCounter{{hi1 ^ c.x[1] ^ key.k[0], lo1, hi0 ^ c.x[3] ^ key.k[1], lo0}};
}

KILN_HOST_DEVICE inline uint32_t lo32(uint64_t v) {
  return static_cast<uint32_t>(v);
}
KILN_HOST_DEVICE inline uint32_t hi32(uint64_t v) {
  return static_cast<uint32_t>(v >> 32);
}

}  // namespace detail

KILN_HOST_DEVICE inline PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  // Random123 order: the first round uses the raw key, and the key is
  // bumped by the Weyl constants before each of the remaining nine.
  for (int round = 0; round < 10; ++round) {
    detail::philox_round(ctr, key);
    key.k[0] += 0x9E3779B9u;
    key.k[1] += 0xBB67AE85u;
  }
  return ctr;
}

// Stream layout shared by kiln's CPU and CUDA random tensors; changing it
// changes every seeded result. For seed s, offset o, element i:
//   uniform: block b = i / 4, counter {lo(b), hi(b), lo(o), hi(o)},
//            key {lo(s), hi(s)}; element i takes word i % 4.
//   normal:  block b = i / 2, same counter/key form; even i uses words
//            (0, 1), odd i uses words (2, 3) as the Box-Muller pair.
KILN_HOST_DEVICE inline PhiloxCounter philox_block(uint64_t seed, uint64_t offset, uint64_t block) {
  using detail::hi32;
  using detail::lo32;
  return philox4x32_10(PhiloxCounter{{lo32(block), hi32(block), lo32(offset), hi32(offset)}},
                       PhiloxKey{{lo32(seed), hi32(seed)}});
}

KILN_HOST_DEVICE inline uint32_t philox_word(uint64_t seed, uint64_t offset, uint64_t index) {
  return philox_block(seed, offset, index / 4).x[index % 4];
}

// 24 bits is a float's full precision, so every result is exact and the
// largest, (2^24 - 1) * 2^-24, stays strictly below 1.
KILN_HOST_DEVICE inline float uint32_to_uniform_float(uint32_t x) {
  return static_cast<float>(x >> 8) * 0x1.0p-24f;
}

// Likewise 53 bits for double.
KILN_HOST_DEVICE inline double uint32x2_to_uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

KILN_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t offset, uint64_t index) {
  return uint32_to_uniform_float(philox_word(seed, offset, index));
}

KILN_HOST_DEVICE inline float philox_normal(uint64_t seed, uint64_t offset, uint64_t index) {
  PhiloxCounter r = philox_block(seed, offset, index / 2);
  uint32_t wa = (index % 2) ? r.x[2] : r.x[0];
  uint32_t wb = (index % 2) ? r.x[3] : r.x[1];
  // u1 lies in (0, 1] so log never sees 0. Working in double keeps host
  // and device libm differences far below float rounding.
  double u1 = (static_cast<double>(wa) + 1.0) * 0x1.0p-32;
  double u2 = static_cast<double>(wb) * 0x1.0p-32;
  constexpr double two_pi = 6.283185307179586476925286766559;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2));
}

// low + (high - low) * u stored as T, kept inside [low, high): rounding to a narrow T (bf16 keeps
// 8 bits) can carry a value just below `high` up to it, and such values fold back to `low`. The
// CPU fill and the CUDA kernel both call this, so one seed gives one tensor on either device.
template <class T>
KILN_HOST_DEVICE inline T philox_uniform_in(uint64_t seed, uint64_t offset, uint64_t index,
                                            double low, double high) {
  double value = low + (high - low) * static_cast<double>(philox_uniform(seed, offset, index));
  T stored = static_cast<T>(value);
  return static_cast<double>(stored) >= high && high > low ? static_cast<T>(low) : stored;
}

}  // namespace kiln
