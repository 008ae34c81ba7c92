// The direct convolution's weight gradient, f32 and bf16: grad_weight[o][k] = sum over positions
// p of grad[o][p] * input[p + offset_k], the forward kernel turned around, on the same padded
// layout of the input (conv2d/direct_layout.h, described in conv2d/direct.cpp).
//
// grad is packed transposed per chunk, [block of output channels][output position][channel] (the
// positions of whole output rows only, so no padding position is summed); a tile of taps x
// output channels (12 x 32 with AVX-512) keeps its sums in registers and, per position,
// broadcasts one input value per tap against the block's channels of grad. (Summing along
// positions instead, with vectors of grad and input reduced at the end, ran at half the speed
// of the 8-float version of this tile: 8 loads per 12 FMAs, a third of them split across cache
// lines.) In bf16, positions go in pairs: grad is packed [p / 2][channel][2 positions] and a
// tap's two inputs are one 32-bit broadcast for vdpbf16ps.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kiln/core/half.h"
#include "kiln/kernels/cpu/conv2d/direct.h"
#include "kiln/kernels/cpu/conv2d/direct_layout.h"
#include "kiln/kernels/cpu/conv2d/direct_tiles.h"
#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

using namespace direct;

namespace {

// Packed grad read per pass over the taps: it stays in L1 while every tap tile reads it.
constexpr int64_t kPassBytes = 16 * 1024;

// Copies grad_out of images [n0, n0 + nb) transposed, per group and block of output channels:
// packed[(grp, block)][output row][ow][channel] for f32, [output row][ow / 2][channel][ow % 2]
// for bf16 with `width` (out_w, rounded up to even for bf16) positions per row; zeros past the
// group's last channel and on the extra position of an odd row. A bf16 pair of positions is one
// 32-bit unit, read as such from grad_out's row. Channel by channel, each row of grad_out is read
// front to back into its units' column of the row's packed cells (a few KB, in L1): a position
// by position gather, one value from each of the block's planes, ran at a third of the speed on
// ResNet-50's 1x1 layers at 56x56, where packing outweighed the sums.
template <class T, class G = std::conditional_t<std::is_same_v<T, BFloat16>, uint16_t, float>>
void pack_grad(const T* grad, const Conv2dGeometry& g, const ChannelBlocks& blocks, int64_t width,
               int64_t n0, int64_t nb, int64_t block_positions, G* packed) {
  constexpr bool pairs = std::is_same_v<T, BFloat16>;
  using Unit = std::conditional_t<pairs, uint32_t, float>;
  const int64_t og = g.out_channels / g.groups;
  const int64_t plane = g.out_h * g.out_w;
  const int64_t units = pairs ? width / 2 : width;      // units per packed row
  const int64_t whole = pairs ? g.out_w / 2 : g.out_w;  // units with every position in the row
  for (int64_t grp = 0; grp < g.groups; ++grp)
    for (int64_t blk = 0; blk < blocks.count; ++blk) {
      const int64_t channels = blocks.width_of(blk), first = blocks.first(blk);
      const int64_t filled = std::min(channels, og - first);
      Unit* block =
          reinterpret_cast<Unit*>(packed + (grp * blocks.padded + first) * block_positions);
      for (int64_t b = 0; b < nb; ++b) {
        const T* planes = grad + ((n0 + b) * g.out_channels + grp * og + first) * plane;
        for (int64_t oh = 0; oh < g.out_h; ++oh) {
          Unit* cells = block + (b * g.out_h + oh) * units * channels;
          for (int64_t j = 0; j < filled; ++j) {
            const T* src = planes + j * plane + oh * g.out_w;
            for (int64_t q = 0; q < whole; ++q) {
              Unit u;
              std::memcpy(&u, src + q * (pairs ? 2 : 1), sizeof(Unit));
              cells[q * channels + j] = u;
            }
            if constexpr (pairs) {
              if (whole < units) cells[whole * channels + j] = src[2 * whole].bits;
            }
          }
          for (int64_t j = filled; j < channels; ++j)
            for (int64_t q = 0; q < units; ++q) cells[q * channels + j] = Unit(0);
        }
      }
    }
}

// Sums grad_weight into `total` ([O][K] f32), f32 or bf16 operands (T).
template <class T>
void backward_weight(const T* grad_out, const T* x, float* total, const Conv2dGeometry& g) {
  constexpr bool pairs = std::is_same_v<T, BFloat16>;
  using E = std::conditional_t<pairs, uint16_t, float>;
  const DirectConvTiles& kernels = direct_conv_tiles();
  const int64_t og = g.out_channels / g.groups;
  const int64_t k_size = g.in_channels / g.groups * g.kernel_h * g.kernel_w;
  const ChannelBlocks blocks = channel_blocks(og, kernels.weight_vectors, kernels.lanes);
  // Positions per packed row: bf16 takes them in pairs, an odd row gets one more, whose grad is
  // zero.
  const int64_t width = pairs ? round_up(g.out_w, 2) : g.out_w;
  const int64_t image_positions = g.out_h * width;
  const int64_t per = images_per_chunk(g, layout_for(g, 1, kernels.tile_positions),
                                       g.groups * blocks.padded * image_positions);
  const Layout l = layout_for(g, per, kernels.tile_positions);
  const std::vector<int64_t> offsets = tap_offsets(g, l);
  const int64_t block_positions = per * image_positions;
  // Output rows per pass, so that a pass's packed grad stays in L1.
  const int64_t row_bytes = width * blocks.width * int64_t{sizeof(E)};
  const int64_t pass_rows = std::max<int64_t>(1, kPassBytes / row_bytes);
  // Per thread, the sums [group][block][K][block width]: grad_weight transposed, blocked like
  // the packed grad.
  const int64_t sums_size = g.groups * blocks.padded * k_size;
  parallel_for(g.batch, flops_per_image(g), [&](int64_t begin, int64_t end) {
    E* chunk = thread_scratch<E>(0, g.in_channels * l.planes * l.channel_stride);
    E* grads = thread_scratch<E>(1, g.groups * blocks.padded * block_positions);
    float* sums = thread_scratch(2, sums_size);
    std::fill(sums, sums + sums_size, 0.0f);
    std::vector<int64_t> rows;
    for (int64_t n0 = begin; n0 < end; n0 += per) {
      const int64_t nb = std::min(per, end - n0), row_count = nb * g.out_h;
      if constexpr (pairs) {
        pack_input(g.in_channels, l, g.in_h, n0, nb, chunk, bf16_rows(x, g, l));
      } else {
        pack_input(g.in_channels, l, g.in_h, n0, nb, chunk, f32_rows(x, g, l));
      }
      pack_grad(grad_out, g, blocks, width, n0, nb, block_positions, grads);
      rows.resize(static_cast<size_t>(row_count));
      for (int64_t r = 0; r < row_count; ++r) rows[r] = row_position(l, r / g.out_h, r % g.out_h);
      // Blocks write disjoint sums, so a single image can split them across threads.
      parallel_for(
          g.groups * blocks.count, k_size * blocks.width * row_count * width,
          [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
              const int64_t grp = i / blocks.count, blk = i % blocks.count;
              const int64_t start = grp * blocks.padded + blocks.first(blk);
              const int64_t vectors = blocks.vectors(blk), channels = blocks.width_of(blk);
              const int64_t* group_offsets = offsets.data() + grp * k_size;
              float* block_sums = sums + start * k_size;
              for (int64_t r0 = 0; r0 < row_count; r0 += pass_rows) {
                const int64_t rn = std::min(pass_rows, row_count - r0);
                const E* grad = grads + start * block_positions + r0 * width * channels;
                for (int64_t k0 = 0; k0 < k_size; k0 += kernels.weight_taps) {
                  const int64_t taps = std::min(kernels.weight_taps, k_size - k0);
                  if constexpr (pairs) {
                    kernels.weight_bf16(taps, vectors, grad, chunk, group_offsets + k0,
                                        rows.data() + r0, rn, width, block_sums + k0 * channels);
                  } else {
                    kernels.weight(taps, vectors, grad, chunk, group_offsets + k0, rows.data() + r0,
                                   rn, width, block_sums + k0 * channels);
                  }
                }
              }
            }
          });
    }
    // Each thread adds its sums into the shared gradient once, transposing them back to [O][K].
#pragma omp critical(kiln_direct_conv2d_backward_weight)
    for (int64_t grp = 0; grp < g.groups; ++grp)
      for (int64_t blk = 0; blk < blocks.count; ++blk) {
        const int64_t channels = blocks.width_of(blk), first = blocks.first(blk);
        const float* block_sums = sums + (grp * blocks.padded + first) * k_size;
        for (int64_t c = 0; c < channels && first + c < og; ++c) {
          float* to = total + (grp * og + first + c) * k_size;
          for (int64_t k = 0; k < k_size; ++k) to[k] += block_sums[k * channels + c];
        }
      }
  });
}

}  // namespace

void direct_conv2d_backward_weight(const float* grad_out, const float* x, float* grad_weight,
                                   const Conv2dGeometry& g) {
  const int64_t weight_numel =
      g.out_channels * (g.in_channels / g.groups) * g.kernel_h * g.kernel_w;
  std::fill(grad_weight, grad_weight + weight_numel, 0.0f);
  if (g.batch == 0 || weight_numel == 0 || g.out_h <= 0 || g.out_w <= 0) return;
  backward_weight(grad_out, x, grad_weight, g);
}

void direct_conv2d_backward_weight(const BFloat16* grad_out, const BFloat16* x,
                                   BFloat16* grad_weight, const Conv2dGeometry& g) {
  const int64_t weight_numel =
      g.out_channels * (g.in_channels / g.groups) * g.kernel_h * g.kernel_w;
  std::vector<float> total(static_cast<size_t>(weight_numel), 0.0f);
  if (g.batch > 0 && weight_numel > 0 && g.out_h > 0 && g.out_w > 0)
    backward_weight(grad_out, x, total.data(), g);
  for (int64_t i = 0; i < weight_numel; ++i)
    grad_weight[i] = BFloat16(total[static_cast<size_t>(i)]);
}

}  // namespace kiln::cpu
