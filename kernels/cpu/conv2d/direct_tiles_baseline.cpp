// The direct convolution's micro-kernels in portable C++ (any x86-64, or another architecture)
// (conv2d/direct_tiles_impl.h).
#define KILN_SIMD KILN_SIMD_BASELINE
#include "kiln/kernels/cpu/conv2d/direct_tiles_impl.h"

namespace kiln::cpu {

const DirectConvTiles direct_conv_tiles_baseline{
    .isa = CpuIsa::baseline,
    .lanes = baseline::kLanes,
    .tile_positions = baseline::kTileVectors * baseline::kLanes,
    .forward = baseline::forward,
    .channel_vectors = baseline::kChannelVectors,
    .channel_positions = baseline::kChannelPositions,
    .forward_channels = baseline::forward_channels,
    .weight_vectors = baseline::kWeightVectors,
    .weight_taps = baseline::kWeightTaps,
    .weight = baseline::weight,
    .forward_bf16 = nullptr,
    .weight_bf16 = nullptr,
};

}  // namespace kiln::cpu
