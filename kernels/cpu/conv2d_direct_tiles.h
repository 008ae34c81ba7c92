// The direct convolution's micro-kernels (the tiles of conv2d_direct.cpp), one set per instruction
// set: conv2d_direct.cpp packs, splits and stores, and calls the set that core/cpu_isa.h chose.
// The kernels are written once (conv2d_direct_tiles_impl.h) and compiled three times:
// conv2d_direct_tiles_baseline.cpp (any x86-64), _avx2.cpp (8 floats a vector) and _avx512.cpp
// (16 floats a vector, 32 registers); _avx512_bf16.cpp adds the bf16 kernels.
#pragma once

#include <cstdint>

#include "kiln/core/cpu_isa.h"

namespace kiln::cpu {

// Output channels per forward tile, and per block of the weight gradient's packed grad.
inline constexpr int64_t kDirectTileChannels = 4;
inline constexpr int64_t kDirectOutputBlock = 16;
// The widest forward tile of any set, for buffers sized at compile time.
inline constexpr int64_t kDirectMaxTilePositions = 64;

struct DirectConvTiles {
  CpuIsa isa;
  // Forward: positions per tile (a multiple of the vector width).
  int64_t tile_positions;
  // Weight gradient: taps per tile, at most.
  int64_t weight_taps;
  // tile[r][j] (r < rows <= 4, j < tile_positions) = (accumulate ? tile[r][j] : bias[r] or 0)
  //   + sum over k < k_size of weights[k * rows + r] * chunk[offsets[k] + p0 + j].
  void (*forward)(int64_t rows, const float* weights, const float* chunk, const int64_t* offsets,
                  int64_t k_size, int64_t p0, const float* bias, bool accumulate, float* tile);
  // sums[t][o] += sum over p in [p_begin, p_end) of chunk[offsets[t] + p] * grad[p][o], for
  // t < taps <= weight_taps and o < 16.
  void (*weight)(int64_t taps, const float* grad, const float* chunk, const int64_t* offsets,
                 int64_t p_begin, int64_t p_end, float* sums);
  // The bf16 kernels, null in a set without bf16 dot products (all but AVX512-BF16's). Each
  // multiplies bf16 pairs and sums a pair's two products into f32 in one instruction (vdpbf16ps).
  // forward_bf16: as forward, where every element of chunk and weights is a pair of bf16 values
  // (the low half of the 32 bits first) from two adjacent input channels, a tap is one pair of
  // channels, and tile[r][j] sums both products of each pair.
  void (*forward_bf16)(int64_t rows, const uint32_t* weights, const uint32_t* chunk,
                       const int64_t* offsets, int64_t k_size, int64_t p0, const float* bias,
                       bool accumulate, float* tile);
  // weight_bf16: as weight, on bf16 values: chunk holds single bf16 channels, grad is packed
  // [p / 2][16 channels][2 positions], and positions go two at a time (p_begin and p_end even).
  void (*weight_bf16)(int64_t taps, const uint16_t* grad, const uint16_t* chunk,
                      const int64_t* offsets, int64_t p_begin, int64_t p_end, float* sums);
};

extern const DirectConvTiles direct_conv_tiles_baseline;
#if defined(__x86_64__)
extern const DirectConvTiles direct_conv_tiles_avx2;
extern const DirectConvTiles direct_conv_tiles_avx512;
extern const DirectConvTiles direct_conv_tiles_avx512_bf16;
#endif

// The set for `isa`: the widest compiled one at or below it.
const DirectConvTiles& direct_conv_tiles(CpuIsa isa = cpu_isa());

}  // namespace kiln::cpu
