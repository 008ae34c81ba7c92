// The direct convolution's micro-kernels, written over simd.h's Vec and compiled once per
// instruction set by conv2d/direct_tiles_{baseline,avx2,avx512}.cpp, each of which includes this
// file after defining KILN_SIMD. conv2d/direct.cpp describes the layout they read.
//
// Position tile (forward): 4 output channels x kTileVectors vectors of positions, 12
// accumulators; per tap, kTileVectors loads of the padded input and 4 broadcast weights feed 12
// FMAs. (With 8 floats a vector that is 24 positions, with 16 floats 48.)
//
// Channel tile (forward): Q positions of an output row x V vectors of output channels; per tap,
// V loads of weights and Q broadcast inputs feed Q * V FMAs. With AVX-512's 32 registers, 14
// positions x 2 vectors (32 channels) hold 28 sums; with 16 registers, 6 x 2.
//
// Weight gradient: sums[t][c] += input[offsets[t] + p] * grad[p][c], the forward turned around.
// grad is packed [p][V vectors of channels]; a tile of T taps x V vectors keeps its sums in
// registers and, per position, broadcasts one input value per tap against the V vectors of grad:
// T broadcasts and V loads per T * V FMAs (12 x 2 with AVX-512, 6 x 2 with 16 registers).
#include <cstdint>

#include "kiln/kernels/cpu/conv2d/direct_tiles.h"
#include "kiln/kernels/cpu/simd.h"

namespace kiln::cpu::KILN_SIMD_NAMESPACE {

constexpr int kTileVectors = 3;
// Accumulators a channel or weight tile keeps: 28 of AVX-512's 32 registers, 12 of 16 otherwise,
// leaving the rest for the loaded vectors and a broadcast.
constexpr int kTileSums = KILN_SIMD_VEC == KILN_SIMD_AVX512 ? 28 : 12;
constexpr int kChannelVectors = 2;
constexpr int kChannelPositions = kTileSums / kChannelVectors;
constexpr int kWeightVectors = 2;
constexpr int kWeightTaps = (KILN_SIMD_VEC == KILN_SIMD_AVX512 ? 24 : 12) / kWeightVectors;

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

template <int Q, int V>
void forward_channels_tile(const float* weights, const float* chunk, const int64_t* offsets,
                           int64_t k_size, int64_t p0, const float* bias, bool accumulate,
                           float* tile) {
  constexpr int width = V * kLanes;
  Vec acc[Q][V];
#pragma GCC unroll 16
  for (int q = 0; q < Q; ++q)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v)
      acc[q][v] = accumulate ? vload(tile + q * width + v * kLanes)
                  : bias     ? vload(bias + v * kLanes)
                             : vzero();
  for (int64_t k = 0; k < k_size; ++k) {
    const float* in = chunk + offsets[k] + p0;
    Vec w[V];
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) w[v] = vload(weights + k * width + v * kLanes);
#pragma GCC unroll 16
    for (int q = 0; q < Q; ++q) {
      const Vec x = vbroadcast(in[q]);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) acc[q][v] = vfma(x, w[v], acc[q][v]);
    }
  }
#pragma GCC unroll 16
  for (int q = 0; q < Q; ++q)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) vstore(tile + q * width + v * kLanes, acc[q][v]);
}

// The tile compiled for `positions` positions, at most Q.
template <int V, int Q = kTileSums / V>
void forward_channels_of(int64_t positions, const float* weights, const float* chunk,
                         const int64_t* offsets, int64_t k_size, int64_t p0, const float* bias,
                         bool accumulate, float* tile) {
  if constexpr (Q > 1) {
    if (positions < Q)
      return forward_channels_of<V, Q - 1>(positions, weights, chunk, offsets, k_size, p0, bias,
                                           accumulate, tile);
  }
  forward_channels_tile<Q, V>(weights, chunk, offsets, k_size, p0, bias, accumulate, tile);
}

void forward_channels(int64_t positions, int64_t vectors, const float* weights, const float* chunk,
                      const int64_t* offsets, int64_t k_size, int64_t p0, const float* bias,
                      bool accumulate, float* tile) {
  if (vectors == 1)
    return forward_channels_of<1, kChannelPositions>(positions, weights, chunk, offsets, k_size, p0,
                                                     bias, accumulate, tile);
  forward_channels_of<2>(positions, weights, chunk, offsets, k_size, p0, bias, accumulate, tile);
}

template <int T, int V>
void weight_tile(const float* grad, const float* chunk, const int64_t* offsets, const int64_t* rows,
                 int64_t row_count, int64_t width, float* sums) {
  constexpr int channels = V * kLanes;
  Vec acc[T][V];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[t][v] = vload(sums + t * channels + v * kLanes);
  for (int64_t r = 0; r < row_count; ++r) {
    const float* in[T];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) in[t] = chunk + offsets[t] + rows[r];
    for (int64_t q = 0; q < width; ++q, grad += channels) {
      Vec g[V];
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) g[v] = vload(grad + v * kLanes);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const Vec x = vbroadcast(in[t][q]);
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) acc[t][v] = vfma(x, g[v], acc[t][v]);
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) vstore(sums + t * channels + v * kLanes, acc[t][v]);
}

// The tile compiled for `taps` taps, at most T.
template <int V, int T = kWeightTaps>
void weight_of(int64_t taps, const float* grad, const float* chunk, const int64_t* offsets,
               const int64_t* rows, int64_t row_count, int64_t width, float* sums) {
  if constexpr (T > 1) {
    if (taps < T)
      return weight_of<V, T - 1>(taps, grad, chunk, offsets, rows, row_count, width, sums);
  }
  weight_tile<T, V>(grad, chunk, offsets, rows, row_count, width, sums);
}

void weight(int64_t taps, int64_t vectors, const float* grad, const float* chunk,
            const int64_t* offsets, const int64_t* rows, int64_t row_count, int64_t width,
            float* sums) {
  if (vectors == 1) return weight_of<1>(taps, grad, chunk, offsets, rows, row_count, width, sums);
  weight_of<2>(taps, grad, chunk, offsets, rows, row_count, width, sums);
}

}  // namespace kiln::cpu::KILN_SIMD_NAMESPACE
