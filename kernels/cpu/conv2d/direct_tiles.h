// The direct convolution's micro-kernels (the tiles of conv2d/direct.cpp), one set per instruction
// set: conv2d/direct.cpp packs, splits and stores, and calls the set that core/cpu_isa.h chose.
// The kernels are written once (conv2d/direct_tiles_impl.h) and compiled three times:
// conv2d/direct_tiles_baseline.cpp (any x86-64), _avx2.cpp (8 floats a vector) and _avx512.cpp
// (16 floats a vector, 32 registers); _avx512_bf16.cpp adds the bf16 kernels.
#pragma once

#include <cstdint>

#include "kiln/core/cpu_isa.h"

namespace kiln::cpu {

// Output channels per position tile.
inline constexpr int64_t kDirectTileChannels = 4;
// The widest position tile of any set, for buffers sized at compile time.
inline constexpr int64_t kDirectMaxTilePositions = 64;

struct DirectConvTiles {
  CpuIsa isa;
  int64_t lanes;  // floats per vector

  // Forward, position tiles: positions in the vector lanes, a few output channels per tile; for
  // convolutions with fewer output channels (per group) than a channel tile holds.
  int64_t tile_positions;  // positions per tile (a multiple of lanes)
  // tile[r][j] (r < rows <= 4, j < tile_positions) = (accumulate ? tile[r][j] : bias[r] or 0)
  //   + sum over k < k_size of weights[k * rows + r] * chunk[offsets[k] + p0 + j].
  void (*forward)(int64_t rows, const float* weights, const float* chunk, const int64_t* offsets,
                  int64_t k_size, int64_t p0, const float* bias, bool accumulate, float* tile);

  // Forward, channel tiles: output channels in the vector lanes (vectors x lanes of them), a run of
  // positions of one output row per tile, so no position on padding is computed.
  int64_t channel_vectors;    // vectors of output channels per tile, at most
  int64_t channel_positions;  // positions per tile, at most
  // tile[q][c] (q < positions, c < vectors * lanes) = (accumulate ? tile[q][c] : bias[c] or 0)
  //   + sum over k < k_size of chunk[offsets[k] + p0 + q] * weights[k * vectors * lanes + c].
  void (*forward_channels)(int64_t positions, int64_t vectors, const float* weights,
                           const float* chunk, const int64_t* offsets, int64_t k_size, int64_t p0,
                           const float* bias, bool accumulate, float* tile);

  // Weight gradient: taps x output channels (vectors x lanes) summed over the positions of whole
  // output rows. grad is packed [row][width][vectors * lanes] (zero past the last channel).
  int64_t weight_vectors;  // vectors of output channels per tile, at most
  int64_t weight_taps;     // taps per tile, at most
  // sums[t][c] += sum over r < row_count, q < width of chunk[offsets[t] + rows[r] + q] *
  //   grad[(r * width + q) * vectors * lanes + c], for t < taps, c < vectors * lanes.
  void (*weight)(int64_t taps, int64_t vectors, const float* grad, const float* chunk,
                 const int64_t* offsets, const int64_t* rows, int64_t row_count, int64_t width,
                 float* sums);

  // The bf16 kernels, null in a set without bf16 dot products (all but AVX512-BF16's). Each
  // multiplies bf16 pairs and sums a pair's two products into f32 in one instruction (vdpbf16ps).
  // forward_bf16: as the f32 position tile (forward), where every element of chunk and weights is
  // a pair of bf16 values (the low half of the 32 bits first) from two adjacent input channels, a
  // tap is one pair of channels, and each sum takes both products of a pair.
  void (*forward_bf16)(int64_t rows, const uint32_t* weights, const uint32_t* chunk,
                       const int64_t* offsets, int64_t k_size, int64_t p0, const float* bias,
                       bool accumulate, float* tile);
  // weight_bf16: as weight, on bf16 values: chunk holds single bf16 channels, positions go two at
  // a time (width is even), and grad is packed [row][width / 2][vectors * lanes][2 positions].
  void (*weight_bf16)(int64_t taps, int64_t vectors, const uint16_t* grad, const uint16_t* chunk,
                      const int64_t* offsets, const int64_t* rows, int64_t row_count, int64_t width,
                      float* sums);
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
