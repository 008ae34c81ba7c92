// The additive mask and the dropout of the attention versions kiln's op routes to (v3_tiled_fa1,
// v4_mma_fa2, v1_recompute, v5_tiled; versions.h: AttentionMask, AttentionDropoutArgs), as host and
// device code, and the refusal of the versions that take neither.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/half.h"  // KILN_HOST_DEVICE
#include "kiln/core/philox.h"
#include "kiln/kernels/cuda/lab/attention/versions.h"

namespace kiln::lab::attention {

// The mask's term for score (h, l, s): 0 without a mask.
KILN_HOST_DEVICE inline float mask_term(const AttentionMask& m, int64_t h, int64_t l, int64_t s) {
  return m.data == nullptr ? 0.0f : m.data[h * m.stride_h + l * m.stride_l + s * m.stride_s];
}

// Dropout as the kernels draw it. kernels/dropout.h keeps an element iff u >= p, u = (word >> 8)
// 2^-24 (philox_uniform); that is (word >> 8) >= ceil(p 2^24) exactly (p 2^24 and its ceiling are
// exact in double), so a kernel compares integers and needs no double.
struct Dropout {
  uint32_t threshold = 0;  // 0: nothing is dropped
  float scale = 1.0f;      // 1 / (1 - p) rounded to f32, as kiln's f32 dropout rounds it
  uint64_t seed = 0;
  uint64_t offset = 0;
  int64_t l_len = 0;  // the weights' [batch_heads, l_len, s_len], for the index
  int64_t s_len = 0;

  // P_ls of head h's factor: scale where kept, 0 where dropped; 1 without dropout.
  KILN_HOST_DEVICE float factor(int64_t h, int64_t l, int64_t s) const {
    if (threshold == 0) return 1.0f;
    const auto index = static_cast<uint64_t>((h * l_len + l) * s_len + s);
    return (philox_word(seed, offset, index) >> 8) >= threshold ? scale : 0.0f;
  }
};

inline Dropout dropout_of(const AttentionDropoutArgs& a, int64_t l_len, int64_t s_len) {
  Dropout d;
  if (a.p > 0.0) {
    d.threshold = static_cast<uint32_t>(std::ceil(a.p * 16777216.0));
    d.scale = static_cast<float>(1.0 / (1.0 - a.p));
    d.seed = a.seed, d.offset = a.offset;
    d.l_len = l_len, d.s_len = s_len;
  }
  return d;
}

inline void check_dropout(const char* version, const AttentionDropoutArgs& a) {
  if (!(a.p >= 0.0 && a.p < 1.0))
    throw ValueError(std::string("lab attention ") + version +
                     ": the dropout probability must be in [0, 1), got " + std::to_string(a.p));
}

// The versions that take no mask tensor and no dropout refuse them.
inline void check_plain(const char* version, const AttentionMask& mask,
                        const AttentionDropoutArgs& dropout) {
  if (mask.data != nullptr || dropout.p != 0.0)
    throw NotImplementedError(std::string("lab attention ") + version +
                              ": takes no mask tensor and no dropout (v3_tiled_fa1, v4_mma_fa2, "
                              "v1_recompute and v5_tiled do)");
}

}  // namespace kiln::lab::attention
