// The direct convolution's micro-kernels with AVX512-BF16: the f32 ones of AVX-512
// (conv2d_direct_tiles_impl.h, compiled again in this file's namespace) and two bf16 ones built
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
// weight_bf16: the weight-gradient tile turned to pairs of positions: grad is packed
// [p / 2][16 channels][2 positions], so one load holds two positions of 16 channels, and a tap's
// input at positions p and p + 1 is one 32-bit broadcast.
#define KILN_SIMD KILN_SIMD_AVX512_BF16
#include <cstdint>

#include "kiln/kernels/cpu/conv2d_direct_tiles_impl.h"

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

template <int Taps>
void weight_tile_bf16(const uint16_t* grad, const uint16_t* chunk, const int64_t* offsets,
                      int64_t p_begin, int64_t p_end, float* sums) {
  Vec acc[Taps];
#pragma GCC unroll 16
  for (int t = 0; t < Taps; ++t) acc[t] = vload(sums + t * kDirectOutputBlock);
  const uint16_t* in[Taps];
#pragma GCC unroll 16
  for (int t = 0; t < Taps; ++t) in[t] = chunk + offsets[t];
  for (int64_t p = p_begin; p < p_end; p += 2) {
    const __m512bh g = bf16_pairs(grad + p * kDirectOutputBlock);
#pragma GCC unroll 16
    for (int t = 0; t < Taps; ++t) acc[t] = _mm512_dpbf16_ps(acc[t], g, broadcast_pair(in[t] + p));
  }
#pragma GCC unroll 16
  for (int t = 0; t < Taps; ++t) vstore(sums + t * kDirectOutputBlock, acc[t]);
}

template <int Taps = kWeightTaps>
void weight_bf16(int64_t taps, const uint16_t* grad, const uint16_t* chunk,
                 const int64_t* offsets, int64_t p_begin, int64_t p_end, float* sums) {
  if constexpr (Taps > 1) {
    if (taps < Taps)
      return weight_bf16<Taps - 1>(taps, grad, chunk, offsets, p_begin, p_end, sums);
  }
  weight_tile_bf16<Taps>(grad, chunk, offsets, p_begin, p_end, sums);
}

}  // namespace

}  // namespace kiln::cpu::avx512_bf16

namespace kiln::cpu {

const DirectConvTiles direct_conv_tiles_avx512_bf16{
    .isa = CpuIsa::avx512_bf16,
    .tile_positions = avx512_bf16::kTileVectors * avx512_bf16::kLanes,
    .weight_taps = avx512_bf16::kWeightTaps,
    .forward = avx512_bf16::forward,
    .weight = avx512_bf16::weight<>,
    .forward_bf16 = avx512_bf16::forward_bf16,
    .weight_bf16 = avx512_bf16::weight_bf16<>,
};

}  // namespace kiln::cpu
