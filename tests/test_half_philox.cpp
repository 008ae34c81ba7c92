#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kiln/core/cpu_isa.h"
#include "kiln/core/half.h"
#include "kiln/core/philox.h"
#include "kiln/kernels/cpu/convert/convert.h"

using kiln::BFloat16;
using kiln::Half;

namespace {

float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

bool half_is_nan(uint16_t b) {
  return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0;
}
bool bf16_is_nan(uint16_t b) {
  return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
}

void check_words(kiln::PhiloxCounter ctr, kiln::PhiloxKey key, const uint32_t (&expect)[4]) {
  kiln::PhiloxCounter out = kiln::philox4x32_10(ctr, key);
  for (int i = 0; i < 4; ++i) CHECK(out.x[i] == expect[i]);
}

}  // namespace

TEST_CASE("philox: Random123 known-answer vectors") {
  check_words({{0, 0, 0, 0}}, {{0, 0}}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  check_words({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, {{0xffffffff, 0xffffffff}},
              {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  check_words({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, {{0xa4093822, 0x299f31d0}},
              {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("philox: word and normal stream layout") {
  const uint64_t seed = 0x123456789abcdefULL, offset = 0xfedcba987654321ULL;
  const uint64_t block = 0x1'0000'0003ULL;
  kiln::PhiloxCounter r =
      kiln::philox4x32_10({{0x3, 0x1, 0x87654321u, 0x0fedcba9u}}, {{0x89abcdefu, 0x01234567u}});
  for (uint64_t w = 0; w < 4; ++w) CHECK(kiln::philox_word(seed, offset, block * 4 + w) == r.x[w]);

  // philox_normal(index) draws from block index / 2.
  const uint64_t even = block * 2, odd = block * 2 + 1;
  auto box_muller = [](uint32_t a, uint32_t b) {
    double u1 = (a + 1.0) * 0x1.0p-32, u2 = b * 0x1.0p-32;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                              std::cos(6.283185307179586476925286766559 * u2));
  };
  CHECK(kiln::philox_normal(seed, offset, even) == box_muller(r.x[0], r.x[1]));
  CHECK(kiln::philox_normal(seed, offset, odd) == box_muller(r.x[2], r.x[3]));
}

TEST_CASE("philox: uniform conversions stay in [0, 1)") {
  CHECK(kiln::uint32_to_uniform_float(0) == 0.0f);
  CHECK(kiln::uint32_to_uniform_float(0xffffffffu) < 1.0f);
  CHECK(kiln::uint32_to_uniform_float(0x80000000u) == 0.5f);
  CHECK(kiln::uint32x2_to_uniform_double(0, 0) == 0.0);
  CHECK(kiln::uint32x2_to_uniform_double(0xffffffffu, 0xffffffffu) < 1.0);
  CHECK(kiln::uint32x2_to_uniform_double(0x80000000u, 0) == 0.5);
}

TEST_CASE("philox: uniform and normal moments") {
  const int n = 100000;
  double sum = 0, sum_sq = 0, nsum = 0, nsum_sq = 0;
  float lo = 1, hi = 0;
  for (int i = 0; i < n; ++i) {
    float u = kiln::philox_uniform(42, 7, i);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    sum_sq += double(u) * u;
    float z = kiln::philox_normal(42, 7, i);
    REQUIRE(std::isfinite(z));
    nsum += z;
    nsum_sq += double(z) * z;
  }
  CHECK(lo >= 0.0f);
  CHECK(hi < 1.0f);
  // Tolerances are about five standard errors of each estimate at n = 1e5.
  double mean = sum / n, var = sum_sq / n - mean * mean;
  CHECK(mean == Approx(0.5).margin(0.0046));
  CHECK(var == Approx(1.0 / 12).margin(0.0012));
  double nmean = nsum / n, nvar = nsum_sq / n - nmean * nmean;
  CHECK(nmean == Approx(0.0).margin(0.016));
  CHECK(nvar == Approx(1.0).margin(0.023));
}

TEST_CASE("philox: streams are deterministic and depend on seed and offset") {
  int same_seed = 0, same_offset = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    CHECK(kiln::philox_word(1, 2, i) == kiln::philox_word(1, 2, i));
    CHECK(kiln::philox_normal(1, 2, i) == kiln::philox_normal(1, 2, i));
    same_seed += kiln::philox_word(1, 2, i) == kiln::philox_word(1ULL << 32 | 1, 2, i);
    same_offset += kiln::philox_word(1, 2, i) == kiln::philox_word(1, 3, i);
  }
  CHECK(same_seed == 0);
  CHECK(same_offset == 0);
}

TEST_CASE("half: exact values") {
  CHECK(Half().bits == 0x0000);
  CHECK(Half(0.0f).bits == 0x0000);
  CHECK(Half(1.0f).bits == 0x3c00);
  CHECK(Half(-2.0f).bits == 0xc000);
  CHECK(Half(65504.0f).bits == 0x7bff);
  CHECK(Half(6.1035156e-05f).bits == 0x0400);
  CHECK(Half(5.9604645e-08f).bits == 0x0001);
  CHECK(float(Half::from_bits(0x7bff)) == 65504.0f);
  CHECK(float(Half::from_bits(0x0001)) == std::ldexp(1.0f, -24));
  CHECK(float(Half::from_bits(0x03ff)) == std::ldexp(1023.0f, -24));
  CHECK(float(Half::from_bits(0x3555)) == 0.333251953125f);
}

TEST_CASE("half: round to nearest even") {
  // 1 + 2^-11 is halfway between 1 (even mantissa) and 1 + 2^-10.
  CHECK(Half(1.0f + std::ldexp(1.0f, -11)).bits == 0x3c00);
  // 1 + 3 * 2^-11 is halfway between mantissas 1 (odd) and 2 (even).
  CHECK(Half(1.0f + 3 * std::ldexp(1.0f, -11)).bits == 0x3c02);
  // Just above the tie rounds up.
  CHECK(Half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)).bits == 0x3c01);
  CHECK(Half(-1.0f - std::ldexp(1.0f, -11)).bits == 0xbc00);
  // Subnormal ties: 2^-25 -> 0, 3 * 2^-25 -> 2 * 2^-24, anything above 2^-25 -> 2^-24.
  CHECK(Half(std::ldexp(1.0f, -25)).bits == 0x0000);
  CHECK(Half(std::ldexp(3.0f, -25)).bits == 0x0002);
  CHECK(Half(std::ldexp(1.5f, -25)).bits == 0x0001);
  CHECK(Half(std::ldexp(1.0f, -26)).bits == 0x0000);
  CHECK(Half(-std::ldexp(1.0f, -26)).bits == 0x8000);
  // Largest subnormal + half an ulp carries into the smallest normal.
  CHECK(Half(std::ldexp(2047.0f, -25)).bits == 0x0400);
  CHECK(Half(65519.0f).bits == 0x7bff);
}

TEST_CASE("half: overflow, infinity, NaN and signed zero") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(Half(65520.0f).bits == 0x7c00);
  CHECK(Half(-65520.0f).bits == 0xfc00);
  CHECK(Half(1e10f).bits == 0x7c00);
  CHECK(Half(std::numeric_limits<float>::max()).bits == 0x7c00);
  CHECK(Half(inf).bits == 0x7c00);
  CHECK(Half(-inf).bits == 0xfc00);
  CHECK(float(Half::from_bits(0x7c00)) == inf);
  CHECK(float(Half::from_bits(0xfc00)) == -inf);

  CHECK(half_is_nan(Half(std::numeric_limits<float>::quiet_NaN()).bits));
  // A signalling NaN whose payload sits below the kept bits must not become inf.
  uint16_t snan = Half(float_from_bits(0x7f800001u)).bits;
  CHECK(half_is_nan(snan));
  CHECK((snan & 0x0200u) != 0);
  CHECK(std::isnan(float(Half::from_bits(0x7e00))));

  Half nz(-0.0f);
  CHECK(nz.bits == 0x8000);
  CHECK(std::signbit(float(nz)));
  CHECK(float(nz) == 0.0f);
}

TEST_CASE("half: every bit pattern round-trips through float") {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = Half::from_bits(static_cast<uint16_t>(b));
    uint16_t back = Half(f).bits;
    if (half_is_nan(static_cast<uint16_t>(b))) {
      REQUIRE(std::isnan(f));
      REQUIRE(half_is_nan(back));
    } else {
      REQUIRE(back == b);
    }
  }
}

TEST_CASE("bfloat16: exact values and round to nearest even") {
  CHECK(BFloat16().bits == 0x0000);
  CHECK(BFloat16(1.0f).bits == 0x3f80);
  CHECK(BFloat16(-2.0f).bits == 0xc000);
  CHECK(float(BFloat16::from_bits(0x3fc0)) == 1.5f);
  // 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7.
  CHECK(BFloat16(1.0f + std::ldexp(1.0f, -8)).bits == 0x3f80);
  // 1 + 3 * 2^-8 is halfway between mantissas 1 (odd) and 2 (even).
  CHECK(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8)).bits == 0x3f82);
  CHECK(BFloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)).bits == 0x3f81);
  // Subnormal floats round the same way.
  CHECK(BFloat16(float_from_bits(0x00018000u)).bits == 0x0002);
  CHECK(BFloat16(float_from_bits(0x00008000u)).bits == 0x0000);
}

TEST_CASE("bfloat16: overflow, infinity, NaN and signed zero") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(BFloat16(std::numeric_limits<float>::max()).bits == 0x7f80);
  CHECK(BFloat16(-std::numeric_limits<float>::max()).bits == 0xff80);
  CHECK(BFloat16(float_from_bits(0x7f7f7fffu)).bits == 0x7f7f);
  CHECK(BFloat16(inf).bits == 0x7f80);
  CHECK(BFloat16(-inf).bits == 0xff80);
  CHECK(float(BFloat16::from_bits(0x7f80)) == inf);

  CHECK(bf16_is_nan(BFloat16(std::numeric_limits<float>::quiet_NaN()).bits));
  CHECK(bf16_is_nan(BFloat16(float_from_bits(0x7f800001u)).bits));
  CHECK(bf16_is_nan(BFloat16(float_from_bits(0x7fffffffu)).bits));
  CHECK(bf16_is_nan(BFloat16(float_from_bits(0xff800001u)).bits));

  BFloat16 nz(-0.0f);
  CHECK(nz.bits == 0x8000);
  CHECK(std::signbit(float(nz)));
}

TEST_CASE("bfloat16: every bit pattern round-trips through float") {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = BFloat16::from_bits(static_cast<uint16_t>(b));
    uint16_t back = BFloat16(f).bits;
    if (bf16_is_nan(static_cast<uint16_t>(b))) {
      REQUIRE(std::isnan(f));
      REQUIRE(bf16_is_nan(back));
    } else {
      REQUIRE(back == b);
    }
  }
}

namespace {

// Floats whose 16-bit conversions are hard: signed zeros, infinities, quiet and signalling NaNs
// with payloads that truncation would lose, the largest finite values, both formats'
// subnormals and their edges, ties on both sides of even, and a spread of random bit patterns.
std::vector<float> conversion_inputs() {
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7f7fffffu, 0xff7fffffu,
                                0x00000001u, 0x807fffffu, 0x00800000u, 0x33800000u, 0x33000000u,
                                0x387fc000u, 0x38800000u, 0x477fe000u, 0x477ff000u, 0x47800000u,
                                0x3f808000u, 0x3f818000u, 0x3f7f8000u, 0x3f800001u, 0x3fffffffu};
  uint32_t state = 12345;
  for (int i = 0; i < 20000; ++i) {
    state = state * 1664525u + 1013904223u;
    bits.push_back(state);
  }
  std::vector<float> values;
  for (uint32_t b : bits) values.push_back(float_from_bits(b));
  return values;
}

// The conversions of `isa` against Half and BFloat16, bit for bit, both ways, on lengths that
// leave every tail size of the vector loops; a set this CPU cannot run is reported skipped.
void check_conversions(kiln::CpuIsa isa) {
  if (isa > kiln::cpu_isa_supported()) {
    WARN("SKIPPED: this CPU cannot run the " << kiln::cpu_isa_name(isa) << " conversions");
    return;
  }
  const kiln::cpu::ConvertKernels& k = kiln::cpu::convert_kernels(isa);
  REQUIRE(k.isa == isa);
  const std::vector<float> in = conversion_inputs();
  for (int64_t n :
       {int64_t{1}, int64_t{7}, int64_t{15}, int64_t{17}, static_cast<int64_t>(in.size())}) {
    std::vector<uint16_t> bf16(n), f16(n);
    k.f32_to_bf16(in.data(), bf16.data(), n);
    k.f32_to_f16(in.data(), f16.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      INFO("input bits " << std::hex << kiln::detail::float_bits(in[i]));
      REQUIRE(bf16[i] == BFloat16(in[i]).bits);
      REQUIRE(f16[i] == Half(in[i]).bits);
    }
  }
  std::vector<uint16_t> every(65536 + 3);
  for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<uint16_t>(i);
  std::vector<float> from_bf16(every.size()), from_f16(every.size());
  k.bf16_to_f32(every.data(), from_bf16.data(), static_cast<int64_t>(every.size()));
  k.f16_to_f32(every.data(), from_f16.data(), static_cast<int64_t>(every.size()));
  for (size_t i = 0; i < every.size(); ++i) {
    INFO("16-bit pattern " << std::hex << every[i]);
    REQUIRE(kiln::detail::float_bits(from_bf16[i]) ==
            kiln::detail::float_bits(static_cast<float>(BFloat16::from_bits(every[i]))));
    REQUIRE(kiln::detail::float_bits(from_f16[i]) ==
            kiln::detail::float_bits(static_cast<float>(Half::from_bits(every[i]))));
  }
}

}  // namespace

TEST_CASE("f32 to and from f16 and bf16, portable loops, bit for bit as Half and BFloat16") {
  check_conversions(kiln::CpuIsa::baseline);
}

TEST_CASE("f32 to and from f16 and bf16, AVX2 and F16C, bit for bit as Half and BFloat16",
          "[may_skip]") {
  check_conversions(kiln::CpuIsa::avx2);
}

TEST_CASE("f32 to and from f16 and bf16, AVX-512, bit for bit as Half and BFloat16", "[may_skip]") {
  check_conversions(kiln::CpuIsa::avx512);
}
