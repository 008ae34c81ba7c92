// The direct convolution's two micro-kernels, written over simd.h's Vec and compiled once per
// instruction set by conv2d_direct_tiles_{baseline,avx2,avx512}.cpp, each of which includes this
// file after defining KILN_SIMD. conv2d_direct.cpp describes the layout they read.
//
// Forward: a tile of 4 output channels x kTileVectors vectors of positions, 12 accumulators; per
// tap, kTileVectors loads of the padded input and 4 broadcast weights feed 12 FMAs. (With 8
// floats a vector that is 24 positions, with 16 floats 48.)
//
// Weight gradient: sums[t][o] += input[offsets[t] + p] * grad[p][o], the forward turned around.
// grad is packed [p][16 output channels]; a tile of kWeightTaps taps x 16 channels keeps its sums
// in registers and, per position, broadcasts one input value per tap against the 16 channels of
// grad (two vectors of 8, or one of 16).
#include <cstdint>

#include "kiln/kernels/cpu/conv2d_direct_tiles.h"
#include "kiln/kernels/cpu/simd.h"

namespace kiln::cpu::KILN_SIMD_NAMESPACE {

constexpr int kTileVectors = 3;
constexpr int kBlockVectors = static_cast<int>(kDirectOutputBlock) / kLanes;
// 12 accumulators with two vectors per block (AVX2, portable); with one (AVX-512) 12 taps, each
// a broadcast against one vector, leave 20 of the 32 registers for the loads.
constexpr int kWeightTaps = 12 / kBlockVectors;

template <int Rows>
void forward_tile(const float* weights, const float* chunk, const int64_t* offsets, int64_t k_size,
                  int64_t p0, const float* bias, bool accumulate, float* tile) {
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
    const float* in = chunk + offsets[k] + p0;
    Vec x[kTileVectors];
#pragma GCC unroll 4
    for (int j = 0; j < kTileVectors; ++j) x[j] = vload(in + j * kLanes);
#pragma GCC unroll 4
    for (int r = 0; r < Rows; ++r) {
      const Vec w = vbroadcast(weights[k * Rows + r]);
#pragma GCC unroll 4
      for (int j = 0; j < kTileVectors; ++j) acc[r][j] = vfma(w, x[j], acc[r][j]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < kTileVectors; ++j) vstore(tile + r * positions + j * kLanes, acc[r][j]);
}

void forward(int64_t rows, const float* weights, const float* chunk, const int64_t* offsets,
             int64_t k_size, int64_t p0, const float* bias, bool accumulate, float* tile) {
  switch (rows) {
    case 4:
      return forward_tile<4>(weights, chunk, offsets, k_size, p0, bias, accumulate, tile);
    case 3:
      return forward_tile<3>(weights, chunk, offsets, k_size, p0, bias, accumulate, tile);
    case 2:
      return forward_tile<2>(weights, chunk, offsets, k_size, p0, bias, accumulate, tile);
    default:
      return forward_tile<1>(weights, chunk, offsets, k_size, p0, bias, accumulate, tile);
  }
}

template <int Taps>
void weight_tile(const float* grad, const float* chunk, const int64_t* offsets, int64_t p_begin,
                 int64_t p_end, float* sums) {
  Vec acc[Taps][kBlockVectors];
#pragma GCC unroll 16
  for (int t = 0; t < Taps; ++t)
#pragma GCC unroll 2
    for (int j = 0; j < kBlockVectors; ++j)
      acc[t][j] = vload(sums + t * kDirectOutputBlock + j * kLanes);
  const float* in[Taps];
#pragma GCC unroll 16
  for (int t = 0; t < Taps; ++t) in[t] = chunk + offsets[t];
  for (int64_t p = p_begin; p < p_end; ++p) {
    Vec g[kBlockVectors];
#pragma GCC unroll 2
    for (int j = 0; j < kBlockVectors; ++j) g[j] = vload(grad + p * kDirectOutputBlock + j * kLanes);
#pragma GCC unroll 16
    for (int t = 0; t < Taps; ++t) {
      const Vec x = vbroadcast(in[t][p]);
#pragma GCC unroll 2
      for (int j = 0; j < kBlockVectors; ++j) acc[t][j] = vfma(x, g[j], acc[t][j]);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < Taps; ++t)
#pragma GCC unroll 2
    for (int j = 0; j < kBlockVectors; ++j)
      vstore(sums + t * kDirectOutputBlock + j * kLanes, acc[t][j]);
}

// The tile compiled for `taps` taps, at most Taps.
template <int Taps = kWeightTaps>
void weight(int64_t taps, const float* grad, const float* chunk, const int64_t* offsets,
            int64_t p_begin, int64_t p_end, float* sums) {
  if constexpr (Taps > 1) {
    if (taps < Taps) return weight<Taps - 1>(taps, grad, chunk, offsets, p_begin, p_end, sums);
  }
  weight_tile<Taps>(grad, chunk, offsets, p_begin, p_end, sums);
}

}  // namespace kiln::cpu::KILN_SIMD_NAMESPACE
