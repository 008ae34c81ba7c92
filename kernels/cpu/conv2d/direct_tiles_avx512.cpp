// The direct convolution's micro-kernels in AVX-512 (conv2d/direct_tiles_impl.h).
#define KILN_SIMD KILN_SIMD_AVX512
#include "kiln/kernels/cpu/conv2d/direct_tiles_impl.h"

namespace kiln::cpu {

const DirectConvTiles direct_conv_tiles_avx512{
    .isa = CpuIsa::avx512,
    .lanes = avx512::kLanes,
    .tile_positions = avx512::kTileVectors * avx512::kLanes,
    .forward = avx512::forward,
    .channel_vectors = avx512::kChannelVectors,
    .channel_positions = avx512::kChannelPositions,
    .forward_channels = avx512::forward_channels,
    .weight_vectors = avx512::kWeightVectors,
    .weight_taps = avx512::kWeightTaps,
    .weight = avx512::weight,
    .forward_bf16 = nullptr,
    .weight_bf16 = nullptr,
};

}  // namespace kiln::cpu
