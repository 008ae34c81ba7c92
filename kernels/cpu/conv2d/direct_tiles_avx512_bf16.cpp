// The direct convolution's micro-kernels with AVX512-BF16: the f32 ones of AVX-512
// (conv2d/direct_tiles_impl.h, compiled again in this file's namespace) and two bf16 ones built
// on vdpbf16ps, which multiplies 16 pairs of bf16 values by 16 others and adds each pair's two
// products to an f32 lane. Products of bf16 values are exact in f32, so these round only where
// the f32 kernels do, in the sums.
//
// forward_bf16: the forward tile (4 output channels x 48 positions, 12 accumulators) with a tap
// made of two input channels: the padded input holds, per position, the pair (channel 2c,
// channel 2c + 1) as 32 bits, so 16 positions' pairs are one 64-byte load, and the weights'
// pair for those two channels is one 32-bit broadcast. Half the taps of the f32 kernel, each
// doing twice the work.
//
// No bf16 channel tile: one with these pairs (14 positions x 32 channels) ran ResNet-20's 32- and
// 64-channel 3x3 forwards no faster than the position tile (1.04-1.05 against 0.97-0.98 ms and
// 1.06-1.07 against 1.07 ms, 2 threads, Zen 5), so bf16 keeps position tiles for every shape.
//
// weight_bf16: the weight-gradient tile turned to pairs of positions: grad is packed
// [row][width / 2][channels][2 positions], so one load holds two positions of 16 channels, and a
// tap's input at positions p and p + 1 is one 32-bit broadcast.
#define KILN_SIMD KILN_SIMD_AVX512_BF16
#include <cstdint>

#include "kiln/kernels/cpu/conv2d/direct_tiles_impl.h"

namespace kiln::cpu::avx512_bf16 {

namespace {

__m512bh bf16_pairs(const void* p) {
  return (__m512bh)_mm512_loadu_si512(p);
}

__m512bh broadcast_pair(const void* p) {
  uint32_t bits;
  __builtin_memcpy(&bits, p, sizeof bits);
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(bits));
}

template <int Rows>
void forward_tile_bf16(const uint32_t* weights, const uint32_t* chunk, const int64_t* offsets,
                       int64_t k_size, int64_t p0, const float* bias, bool accumulate,
                       float* tile) {
  constexpr int64_t positions = kTileVectors * kLanes;
  Vec acc[Rows][kTileVectors];
#pragma GCC unroll 4
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < kTileVectors; ++j)
      acc[r][j] = accumulate ? vload(tile + r * positions + j * kLanes)
                  : bias     ? vbroadcast(bias[r])
                             : vzero();
  for (int64_t k = 0; k < k_size; ++k) {
    const uint32_t* in = chunk + offsets[k] + p0;
    __m512bh x[kTileVectors];
#pragma GCC unroll 4
    for (int j = 0; j < kTileVectors; ++j) x[j] = bf16_pairs(in + j * kLanes);
#pragma GCC unroll 4
    for (int r = 0; r < Rows; ++r) {
      const __m512bh w = broadcast_pair(weights + k * Rows + r);
#pragma GCC unroll 4
      for (int j = 0; j < kTileVectors; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], x[j], w);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < kTileVectors; ++j) vstore(tile + r * positions + j * kLanes, acc[r][j]);
}

void forward_bf16(int64_t rows, const uint32_t* weights, const uint32_t* chunk,
                  const int64_t* offsets, int64_t k_size, int64_t p0, const float* bias,
                  bool accumulate, float* tile) {
  switch (rows) {
    case 4:
      return forward_tile_bf16<4>(weights, chunk, offsets, k_size, p0, bias, accumulate, tile);
    case 3:
      return forward_tile_bf16<3>(weights, chunk, offsets, k_size, p0, bias, accumulate, tile);
    case 2:
      return forward_tile_bf16<2>(weights, chunk, offsets, k_size, p0, bias, accumulate, tile);
    default:
      return forward_tile_bf16<1>(weights, chunk, offsets, k_size, p0, bias, accumulate, tile);
  }
}

template <int T, int V>
void weight_tile_bf16(const uint16_t* grad, const uint16_t* chunk, const int64_t* offsets,
                      const int64_t* rows, int64_t row_count, int64_t width, float* sums) {
  constexpr int channels = V * kLanes;
  Vec acc[T][V];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[t][v] = vload(sums + t * channels + v * kLanes);
  for (int64_t r = 0; r < row_count; ++r) {
    const uint16_t* in[T];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) in[t] = chunk + offsets[t] + rows[r];
    for (int64_t q = 0; q < width; q += 2, grad += 2 * channels) {
      __m512bh g[V];
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) g[v] = bf16_pairs(grad + 2 * v * kLanes);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const __m512bh x = broadcast_pair(in[t] + q);
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) acc[t][v] = _mm512_dpbf16_ps(acc[t][v], g[v], x);
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) vstore(sums + t * channels + v * kLanes, acc[t][v]);
}

template <int V, int T = kWeightTaps>
void weight_bf16_of(int64_t taps, const uint16_t* grad, const uint16_t* chunk,
                    const int64_t* offsets, const int64_t* rows, int64_t row_count, int64_t width,
                    float* sums) {
  if constexpr (T > 1) {
    if (taps < T)
      return weight_bf16_of<V, T - 1>(taps, grad, chunk, offsets, rows, row_count, width, sums);
  }
  weight_tile_bf16<T, V>(grad, chunk, offsets, rows, row_count, width, sums);
}

void weight_bf16(int64_t taps, int64_t vectors, const uint16_t* grad, const uint16_t* chunk,
                 const int64_t* offsets, const int64_t* rows, int64_t row_count, int64_t width,
                 float* sums) {
  if (vectors == 1)
    return weight_bf16_of<1>(taps, grad, chunk, offsets, rows, row_count, width, sums);
  weight_bf16_of<2>(taps, grad, chunk, offsets, rows, row_count, width, sums);
}

}  // namespace

}  // namespace kiln::cpu::avx512_bf16

namespace kiln::cpu {

const DirectConvTiles direct_conv_tiles_avx512_bf16{
    .isa = CpuIsa::avx512_bf16,
    .lanes = avx512_bf16::kLanes,
    .tile_positions = avx512_bf16::kTileVectors * avx512_bf16::kLanes,
    .forward = avx512_bf16::forward,
    .channel_vectors = avx512_bf16::kChannelVectors,
    .channel_positions = avx512_bf16::kChannelPositions,
    .forward_channels = avx512_bf16::forward_channels,
    .weight_vectors = avx512_bf16::kWeightVectors,
    .weight_taps = avx512_bf16::kWeightTaps,
    .weight = avx512_bf16::weight,
    .forward_bf16 = avx512_bf16::forward_bf16,
    .weight_bf16 = avx512_bf16::weight_bf16,
};

}  // namespace kiln::cpu
