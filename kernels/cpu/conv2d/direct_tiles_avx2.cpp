// The direct convolution's micro-kernels in AVX2 + FMA (conv2d/direct_tiles_impl.h).
#define KILN_SIMD KILN_SIMD_AVX2
#include "kiln/kernels/cpu/conv2d/direct_tiles_impl.h"

namespace kiln::cpu {

const DirectConvTiles direct_conv_tiles_avx2{
    .isa = CpuIsa::avx2,
    .lanes = avx2::kLanes,
    .tile_positions = avx2::kTileVectors * avx2::kLanes,
    .forward = avx2::forward,
    .channel_vectors = avx2::kChannelVectors,
    .channel_positions = avx2::kChannelPositions,
    .forward_channels = avx2::forward_channels,
    .weight_vectors = avx2::kWeightVectors,
    .weight_taps = avx2::kWeightTaps,
    .weight = avx2::weight,
    .forward_bf16 = nullptr,
    .weight_bf16 = nullptr,
};

}  // namespace kiln::cpu
