// f32 and bf16 convolution without a column matrix: the forward and the input gradient (the
// weight gradient is in conv2d/direct_weight.cpp).
//
// The layout (conv2d/direct_layout.h), for stride 1. A chunk of images is copied once into a
// padded buffer, channel by channel. Each channel is a grid of rows `row_stride = W + gap_w` wide:
// gap_w zeros, then one input row. Images follow each other every `image_rows = H + gap_h` rows,
// after gap_h rows of zeros. One run of zeros thus pads two neighbours at once: the end of a row
// and the start of the next, the bottom of an image and the top of the next (for a 3x3 kernel
// with padding 1 both gaps are 1). Output (b, oh, ow) lives at position p = (b * image_rows + oh)
// * row_stride + ow, and kernel tap (c, ki, kj) reads its input at p + c * channel_stride + ki *
// dilation_h * row_stride + kj * dilation_w: one fixed offset per tap, so the "column matrix" of
// im2col is the padded buffer itself, read at K shifted offsets.
//
// Stride s. Each input plane is split into its s x s phases (even rows and even columns, even
// rows and odd columns, ...), each packed as above. Output o then reads input s * o + e, which is
// phase e mod s at offset o + floor(e / s): again one fixed offset per tap, into the plane of
// the tap's phase. Phases no tap reads (three of the four of a 1x1 stride-2 shortcut) are not
// packed.
//
// Two forward micro-kernels (conv2d/direct_tiles_impl.h), chosen by the output channels:
// - channel tiles, for f32 convolutions with at least 144 taps and a group of at least a tile's
//   width of output channels (32 with AVX-512, 16 with 8-float vectors): output channels in the
//   vector lanes, a run of up to 14 positions of one output row per tile (6 with AVX2). Per tap,
//   2 loads of weights and one broadcast input per position feed 28 FMAs, and no position on the
//   layout's padding is computed. The sums of a chunk ([position][channel]) are transposed into
//   the output at the end.
// - position tiles, for the rest (ResNet's first stage of 16 channels, every bf16 convolution): a
//   tile of 4 output channels x 3 vectors of positions (24 with AVX2's 8 floats, 48 with
//   AVX-512's 16) in 12 registers; per tap, three loads of the padded input and four broadcast
//   weights feed 12 FMAs. Positions that fall on padding (ow >= OW, oh >= OH: about 7% of them at
//   28x28) are computed too and thrown away.
//
// The input gradient runs on the same kernels: each stride x stride phase of grad_x is a stride-1
// convolution of grad_out with the taps that land on that phase, flipped, stored straight into
// every stride-th row and column of grad_x (direct_conv2d_backward_input, at the end of this file).
//
// The micro-kernels are compiled once per instruction set and the one core/cpu_isa.h chose is
// called through a table; this file, which packs the layout, splits the work and stores the
// tiles, is the same for all of them.
#include "kiln/kernels/cpu/conv2d/direct.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/core/half.h"
#include "kiln/kernels/cpu/conv2d/direct_layout.h"
#include "kiln/kernels/cpu/conv2d/direct_tiles.h"
#include "kiln/kernels/cpu/convert/convert.h"
#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

using namespace direct;

namespace {

constexpr int64_t kTileChannels = kDirectTileChannels;  // position tiles: output channels
// Taps per pass over a tile: the input a tile reads for one block (a few cache lines per tap)
// and, for channel tiles, the block's weights (160 x 32 floats, 20 KB) stay in L1 while every
// tile of the chunk uses them.
constexpr int64_t kTapBlock = 160;

// Where a convolution's output (b, o, oh, ow) goes: out[b * image + o * plane + oh * row + ow *
// col]. Dense for the forward; every stride-th row and column for a phase of the input gradient.
struct OutputView {
  int64_t image, plane, row, col;
};

OutputView dense_view(const Conv2dGeometry& g) {
  return {g.out_channels * g.out_h * g.out_w, g.out_h * g.out_w, g.out_w, 1};
}

// Writes runs of n sums to dst, every step-th element, rounded to bf16 when the output is. The
// conversion is looked up once per convolution: a lookup per run (a few per tile and channel)
// cost the bf16 forward several percent.
struct RunStore {
  void (*to_bf16)(const float*, uint16_t*, int64_t) = convert_kernels().f32_to_bf16;

  void operator()(const float* src, float* dst, int64_t n, int64_t step) const {
    if (step == 1) {
      copy_short(src, dst, n);
      return;
    }
    for (int64_t i = 0; i < n; ++i) dst[i * step] = src[i];
  }
  void operator()(const float* src, BFloat16* dst, int64_t n, int64_t step) const {
    if (step == 1) {
      to_bf16(src, &dst->bits, n);
      return;
    }
    for (int64_t i = 0; i < n; ++i) dst[i * step] = BFloat16(src[i]);
  }
};

// Taps per block: k_size split into equal blocks of at most kTapBlock.
int64_t tap_block(int64_t k_size) {
  const int64_t count = std::max<int64_t>(1, (k_size + kTapBlock - 1) / kTapBlock);
  return (k_size + count - 1) / count;
}

// Tile rows [o0, o0 + rows) of a group's [Og, K] weight block, as [K][rows]: the four weights one
// tap multiplies sit side by side for the broadcasts.
std::vector<float> pack_position_weights(const float* weight, const Conv2dGeometry& g,
                                         int64_t k_size) {
  const int64_t og = g.out_channels / g.groups;
  std::vector<float> packed(static_cast<size_t>(g.out_channels * k_size));
  float* dst = packed.data();
  for (int64_t grp = 0; grp < g.groups; ++grp)
    for (int64_t o0 = 0; o0 < og; o0 += kTileChannels) {
      const int64_t rows = std::min<int64_t>(kTileChannels, og - o0);
      const float* w = weight + (grp * og + o0) * k_size;
      for (int64_t k = 0; k < k_size; ++k)
        for (int64_t r = 0; r < rows; ++r) *dst++ = w[r * k_size + k];
    }
  return packed;
}

// The weight of output channel o (of all), packed tap k, as the kernels' element: f32, or for bf16
// the pair of input channels 2c, 2c + 1 (the lower in the low half, zero past the group's last)
// of tap k = (c, ki, kj).
float packed_weight(const float* weight, const Conv2dGeometry& g, int64_t o, int64_t k) {
  return weight[o * (g.in_channels / g.groups) * g.kernel_h * g.kernel_w + k];
}

uint32_t packed_weight(const BFloat16* weight, const Conv2dGeometry& g, int64_t o, int64_t k) {
  const int64_t taps = g.kernel_h * g.kernel_w, cg = g.in_channels / g.groups;
  const int64_t c = 2 * (k / taps), tap = k % taps;
  const BFloat16* w = weight + (o * cg + c) * taps + tap;
  return uint32_t{w[0].bits} | (c + 1 < cg ? uint32_t{w[taps].bits} << 16 : 0u);
}

// The same for forward_bf16's position tiles (one group).
std::vector<uint32_t> pack_position_weights(const BFloat16* weight, const Conv2dGeometry& g,
                                            int64_t k_size) {
  std::vector<uint32_t> packed(static_cast<size_t>(g.out_channels * k_size));
  uint32_t* dst = packed.data();
  for (int64_t o0 = 0; o0 < g.out_channels; o0 += kTileChannels) {
    const int64_t rows = std::min<int64_t>(kTileChannels, g.out_channels - o0);
    for (int64_t k = 0; k < k_size; ++k)
      for (int64_t r = 0; r < rows; ++r) *dst++ = packed_weight(weight, g, o0 + r, k);
  }
  return packed;
}

// Channel tiles' weights (f32): [group][block][K][block width], zero in the lanes past the
// group's last channel; a block starts at (grp * padded + first) * K.
std::vector<float> pack_channel_weights(const float* weight, const Conv2dGeometry& g,
                                        int64_t k_size, const ChannelBlocks& blocks) {
  const int64_t og = g.out_channels / g.groups;
  std::vector<float> packed(static_cast<size_t>(g.groups * blocks.padded * k_size), 0.0f);
  for (int64_t grp = 0; grp < g.groups; ++grp)
    for (int64_t blk = 0; blk < blocks.count; ++blk) {
      const int64_t width = blocks.width_of(blk), first = blocks.first(blk);
      float* dst = packed.data() + (grp * blocks.padded + first) * k_size;
      for (int64_t k = 0; k < k_size; ++k)
        for (int64_t c = 0; c < width && first + c < og; ++c)
          dst[k * width + c] = packed_weight(weight, g, grp * og + first + c, k);
    }
  return packed;
}

// The runs of a tile's positions [p0, p0 + tile_positions) that hold outputs, one per output row
// it crosses: where a run starts in the tile and in the chunk's output (for output channel 0), and
// its length.
struct TileRuns {
  int64_t count = 0;
  int64_t tile_at[kDirectMaxTilePositions], out_at[kDirectMaxTilePositions],
      length[kDirectMaxTilePositions];
};

TileRuns tile_runs(int64_t p0, int64_t tile_positions, int64_t used, const Layout& l,
                   const Conv2dGeometry& g, const OutputView& view) {
  TileRuns runs;
  const int64_t end = std::min(p0 + tile_positions, used);
  for (int64_t p = p0; p < end;) {
    const int64_t row = p / l.row_stride, col = p - row * l.row_stride;
    const int64_t run_end = std::min(end, (row + 1) * l.row_stride);
    const int64_t b = row / l.image_rows, oh = row - b * l.image_rows;
    if (oh < g.out_h && col < g.out_w) {
      runs.tile_at[runs.count] = p - p0;
      runs.out_at[runs.count] = b * view.image + oh * view.row + col * view.col;
      runs.length[runs.count] = std::min(run_end, row * l.row_stride + g.out_w) - p;
      ++runs.count;
    }
    p = run_end;
  }
  return runs;
}

// The forward with position tiles, f32 or bf16 (T): the bf16 one packs pairs of channels (one
// group only) and runs forward_bf16; both sum in f32 tiles.
template <class T>
void forward_positions(const T* x, const T* weight, const float* bias, T* out,
                       const Conv2dGeometry& g, const OutputView& view) {
  constexpr bool pairs = std::is_same_v<T, BFloat16>;
  using E = std::conditional_t<pairs, uint32_t, float>;
  const DirectConvTiles& kernels = direct_conv_tiles();
  const int64_t tile_positions = kernels.tile_positions;
  // The layout's view: a packed channel is a pair of input channels in bf16.
  Conv2dGeometry packed = g;
  if (pairs) packed.in_channels = (g.in_channels + 1) / 2;
  const int64_t og = g.out_channels / g.groups;
  const int64_t k_size = packed.in_channels / g.groups * g.kernel_h * g.kernel_w;
  const int64_t per = images_per_chunk(packed, layout_for(packed, 1, tile_positions), 0);
  const Layout l = layout_for(packed, per, tile_positions);
  const std::vector<int64_t> offsets = tap_offsets(packed, l);
  const std::vector<E> weights = pack_position_weights(weight, g, k_size);
  const int64_t tap_block_size = tap_block(k_size);
  const RunStore store_run;
  // Positions [p0, p0 + tile_positions) of group grp of the chunk at image n0, every output
  // channel, summed block by block into `tile` [og, tile_positions] and then copied to the
  // outputs.
  auto forward_position_tile = [&](int64_t n0, int64_t used, int64_t p0, int64_t grp,
                                   const E* chunk, float* tile) {
    const E* group_weights = weights.data() + grp * og * k_size;
    const int64_t* group_offsets = offsets.data() + grp * k_size;
    for (int64_t k0 = 0; k0 < k_size; k0 += tap_block_size) {
      const int64_t kn = std::min(tap_block_size, k_size - k0);
      for (int64_t o0 = 0; o0 < og; o0 += kTileChannels) {
        const int64_t rows = std::min<int64_t>(kTileChannels, og - o0);
        const float* row_bias = bias ? bias + grp * og + o0 : nullptr;
        if constexpr (pairs) {
          kernels.forward_bf16(rows, group_weights + o0 * k_size + k0 * rows, chunk,
                               group_offsets + k0, kn, p0, row_bias, k0 > 0,
                               tile + o0 * tile_positions);
        } else {
          kernels.forward(rows, group_weights + o0 * k_size + k0 * rows, chunk, group_offsets + k0,
                          kn, p0, row_bias, k0 > 0, tile + o0 * tile_positions);
        }
      }
    }
    // Runs are worked out once per tile (two divisions per output row crossed) rather than once
    // per row block.
    const TileRuns runs = tile_runs(p0, tile_positions, used, l, g, view);
    T* group_out = out + n0 * view.image + grp * og * view.plane;
    for (int64_t r = 0; r < og; ++r)
      for (int64_t i = 0; i < runs.count; ++i)
        store_run(tile + r * tile_positions + runs.tile_at[i],
                  group_out + r * view.plane + runs.out_at[i], runs.length[i], view.col);
  };
  parallel_for(g.batch, flops_per_image(g), [&](int64_t begin, int64_t end) {
    E* chunk = thread_scratch<E>(0, packed.in_channels * l.planes * l.channel_stride);
    for (int64_t n0 = begin; n0 < end; n0 += per) {
      const int64_t nb = std::min(per, end - n0), used = used_positions(l, nb);
      if constexpr (pairs) {
        pack_input(packed.in_channels, l, g.in_h, n0, nb, chunk, bf16_pair_rows(x, g, l));
      } else {
        pack_input(g.in_channels, l, g.in_h, n0, nb, chunk, f32_rows(x, g, l));
      }
      // Inside the loop over images this runs on the calling thread; with a single image it is
      // what spreads the work across threads.
      const int64_t tiles = (used + tile_positions - 1) / tile_positions;
      parallel_for(tiles, flops_per_image(g) / std::max<int64_t>(tiles, 1) * nb,
                   [&](int64_t t0, int64_t t1) {
                     float* tile = thread_scratch(1, og * tile_positions);
                     for (int64_t t = t0; t < t1; ++t)
                       for (int64_t grp = 0; grp < g.groups; ++grp)
                         forward_position_tile(n0, used, t * tile_positions, grp, chunk, tile);
                   });
    }
  });
}

// The forward with channel tiles (f32). A chunk's sums are kept [group][block][output row of the
// chunk][ow][block width] and written out once every tap has been added.
void forward_channels(const float* x, const float* weight, const float* bias, float* out,
                      const Conv2dGeometry& g, const OutputView& view) {
  const DirectConvTiles& kernels = direct_conv_tiles();
  const int64_t og = g.out_channels / g.groups;
  const int64_t k_size = g.in_channels / g.groups * g.kernel_h * g.kernel_w;
  const ChannelBlocks blocks = channel_blocks(og, kernels.channel_vectors, kernels.lanes);
  const int64_t plane = g.out_h * g.out_w;
  const int64_t per = images_per_chunk(g, layout_for(g, 1, kernels.tile_positions),
                                       g.groups * blocks.padded * plane);
  const Layout l = layout_for(g, per, kernels.tile_positions);
  const std::vector<int64_t> offsets = tap_offsets(g, l);
  const std::vector<float> weights = pack_channel_weights(weight, g, k_size, blocks);
  std::vector<float> bias_blocks;
  if (bias) {
    bias_blocks.assign(static_cast<size_t>(g.groups * blocks.padded), 0.0f);
    for (int64_t grp = 0; grp < g.groups; ++grp)
      std::copy(bias + grp * og, bias + (grp + 1) * og, bias_blocks.begin() + grp * blocks.padded);
  }
  const int64_t tap_block_size = tap_block(k_size);
  const RunStore store_run;
  // A row of up to channel_positions positions per tile: 28 = 14 + 14, 15 = 8 + 7.
  const int64_t segments = (g.out_w + kernels.channel_positions - 1) / kernels.channel_positions;
  const int64_t block_sums = per * plane;  // positions of one block's sums
  // Output rows [r0, r1) of the chunk at n0 (row r is image r / OH, row r % OH), every tap, then
  // stored.
  auto chunk_rows = [&](int64_t n0, const float* chunk, float* sums, int64_t r0, int64_t r1) {
    for (int64_t grp = 0; grp < g.groups; ++grp)
      for (int64_t k0 = 0; k0 < k_size; k0 += tap_block_size) {
        const int64_t kn = std::min(tap_block_size, k_size - k0);
        for (int64_t blk = 0; blk < blocks.count; ++blk) {
          const int64_t start = grp * blocks.padded + blocks.first(blk);
          const int64_t vectors = blocks.vectors(blk), width = blocks.width_of(blk);
          const float* w = weights.data() + start * k_size + k0 * width;
          const float* block_bias = bias && k0 == 0 ? bias_blocks.data() + start : nullptr;
          float* block = sums + start * block_sums;
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t p_row = row_position(l, r / g.out_h, r % g.out_h);
            for (int64_t s = 0, ow = 0; s < segments; ++s) {
              const int64_t q = (g.out_w - ow) / (segments - s);
              kernels.forward_channels(q, vectors, w, chunk, offsets.data() + grp * k_size + k0, kn,
                                       p_row + ow, block_bias, k0 > 0,
                                       block + (r * g.out_w + ow) * width);
              ow += q;
            }
          }
        }
      }
    // The sums, [row][ow][channel] per block, transposed to the output's rows.
    std::vector<float> line(static_cast<size_t>(g.out_w));
    for (int64_t grp = 0; grp < g.groups; ++grp)
      for (int64_t blk = 0; blk < blocks.count; ++blk) {
        const int64_t start = grp * blocks.padded + blocks.first(blk), width = blocks.width_of(blk);
        const float* block = sums + start * block_sums;
        for (int64_t c = 0; c < width && blocks.first(blk) + c < og; ++c) {
          float* channel = out + (grp * og + blocks.first(blk) + c) * view.plane;
          for (int64_t r = r0; r < r1; ++r) {
            const float* src = block + r * g.out_w * width + c;
            for (int64_t ow = 0; ow < g.out_w; ++ow) line[ow] = src[ow * width];
            store_run(line.data(),
                      channel + (n0 + r / g.out_h) * view.image + (r % g.out_h) * view.row, g.out_w,
                      view.col);
          }
        }
      }
  };
  parallel_for(g.batch, flops_per_image(g), [&](int64_t begin, int64_t end) {
    float* chunk = thread_scratch(0, g.in_channels * l.planes * l.channel_stride);
    float* sums = thread_scratch(1, g.groups * blocks.padded * block_sums);
    for (int64_t n0 = begin; n0 < end; n0 += per) {
      const int64_t nb = std::min(per, end - n0);
      pack_input(g.in_channels, l, g.in_h, n0, nb, chunk, f32_rows(x, g, l));
      // Inside the loop over images this runs on the calling thread; with a single image it is
      // what spreads the work across threads.
      const int64_t rows = nb * g.out_h;
      parallel_for(rows, flops_per_image(g) / g.out_h,
                   [&](int64_t r0, int64_t r1) { chunk_rows(n0, chunk, sums, r0, r1); });
    }
  });
}

// The forward into `view`, bias (f32 copy) optional: in f32, channel tiles where a group has
// enough output channels to fill one and at least 144 taps; position tiles otherwise, and for
// bf16 always (see conv2d/direct_tiles_avx512_bf16.cpp).
template <class T>
void forward(const T* x, const T* weight, const float* bias, T* out, const Conv2dGeometry& g,
             const OutputView& view) {
  if (g.batch == 0 || g.out_channels == 0 || g.out_h <= 0 || g.out_w <= 0) return;
  if constexpr (std::is_same_v<T, float>) {
    const DirectConvTiles& kernels = direct_conv_tiles();
    const int64_t k_size = g.in_channels / g.groups * g.kernel_h * g.kernel_w;
    if (k_size >= 144 && g.out_channels / g.groups >= kernels.channel_vectors * kernels.lanes) {
      forward_channels(x, weight, bias, out, g, view);
      return;
    }
  }
  forward_positions(x, weight, bias, out, g, view);
}

template <class T>
std::vector<float> bias_f32(const T* bias, const Conv2dGeometry& g) {
  return bias ? std::vector<float>(bias, bias + g.out_channels) : std::vector<float>();
}

}  // namespace

void direct_conv2d_forward(const float* x, const float* weight, const float* bias, float* out,
                           const Conv2dGeometry& g) {
  forward(x, weight, bias, out, g, dense_view(g));
}

bool direct_conv2d_takes_bf16(const Conv2dGeometry& g) {
  return g.groups == 1 && direct_conv_tiles().forward_bf16 != nullptr;
}

void direct_conv2d_forward(const BFloat16* x, const BFloat16* weight, const BFloat16* bias,
                           BFloat16* out, const Conv2dGeometry& g) {
  const std::vector<float> b = bias_f32(bias, g);
  forward(x, weight, bias ? b.data() : nullptr, out, g, dense_view(g));
}

namespace {

// The taps of one axis that land on input phase `phase` (k * dilation - pad = stride * shift +
// phase), from the last to the first: as a stride-1 kernel over grad_out, tap kk reads grad_out at
// i + kk * dilation - pad for input i * stride + phase, since grad_x gets grad_out[i - shift].
struct PhaseTaps {
  std::vector<int64_t> taps;
  int64_t dilation = 1, pad = 0;
};

PhaseTaps phase_taps(int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, int64_t phase) {
  PhaseTaps p;
  auto shift = [&](int64_t k) { return floor_div(k * dilation - pad, stride); };
  for (int64_t k = kernel - 1; k >= 0; --k)
    if (k * dilation - pad - shift(k) * stride == phase) p.taps.push_back(k);
  if (p.taps.empty()) return p;
  p.pad = shift(p.taps[0]);
  if (p.taps.size() > 1) p.dilation = shift(p.taps[0]) - shift(p.taps[1]);
  return p;
}

template <class T>
void backward_input(const T* grad_out, const T* weight, T* grad_x, const Conv2dGeometry& g) {
  const int64_t og = g.out_channels / g.groups, cg = g.in_channels / g.groups;
  const int64_t image = g.in_h * g.in_w;
  const int64_t phases_h = std::min(g.stride_h, g.in_h), phases_w = std::min(g.stride_w, g.in_w);
  // A phase no tap reaches stays zero (three of the four of a 1x1 stride-2 kernel).
  bool all_reached = true;
  for (int64_t a = 0; a < phases_h; ++a)
    for (int64_t b = 0; b < phases_w; ++b)
      all_reached = all_reached &&
                    !phase_taps(g.kernel_h, g.stride_h, g.pad_h, g.dilation_h, a).taps.empty() &&
                    !phase_taps(g.kernel_w, g.stride_w, g.pad_w, g.dilation_w, b).taps.empty();
  if (!all_reached) std::fill(grad_x, grad_x + g.batch * g.in_channels * image, T(0.0f));
  for (int64_t a = 0; a < phases_h; ++a)
    for (int64_t b = 0; b < phases_w; ++b) {
      const PhaseTaps rows = phase_taps(g.kernel_h, g.stride_h, g.pad_h, g.dilation_h, a);
      const PhaseTaps cols = phase_taps(g.kernel_w, g.stride_w, g.pad_w, g.dilation_w, b);
      if (rows.taps.empty() || cols.taps.empty()) continue;
      const int64_t kh = static_cast<int64_t>(rows.taps.size());
      const int64_t kw = static_cast<int64_t>(cols.taps.size());
      Conv2dGeometry t;
      t.batch = g.batch;
      t.in_channels = g.out_channels, t.in_h = g.out_h, t.in_w = g.out_w;
      t.out_channels = g.in_channels, t.kernel_h = kh, t.kernel_w = kw;
      t.out_h = (g.in_h - a + g.stride_h - 1) / g.stride_h;
      t.out_w = (g.in_w - b + g.stride_w - 1) / g.stride_w;
      t.pad_h = rows.pad, t.pad_w = cols.pad;
      t.dilation_h = rows.dilation, t.dilation_w = cols.dilation;
      t.groups = g.groups;
      // The phase's taps with the channel dims swapped: [C, O/groups, kh, kw].
      std::vector<T> taps(static_cast<size_t>(g.in_channels * og * kh * kw));
      for (int64_t grp = 0; grp < g.groups; ++grp)
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t o = 0; o < og; ++o)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j)
                taps[static_cast<size_t>((((grp * cg + c) * og + o) * kh + i) * kw + j)] =
                    weight[(((grp * og + o) * cg + c) * g.kernel_h + rows.taps[i]) * g.kernel_w +
                           cols.taps[j]];
      // The phase's outputs are grad_x's rows a, a + stride, ... and columns b, b + stride, ...
      const OutputView view{g.in_channels * image, image, g.stride_h * g.in_w, g.stride_w};
      forward<T>(grad_out, taps.data(), nullptr, grad_x + a * g.in_w + b, t, view);
    }
}

}  // namespace

void direct_conv2d_backward_input(const float* grad_out, const float* weight, float* grad_x,
                                  const Conv2dGeometry& g) {
  backward_input(grad_out, weight, grad_x, g);
}

void direct_conv2d_backward_input(const BFloat16* grad_out, const BFloat16* weight,
                                  BFloat16* grad_x, const Conv2dGeometry& g) {
  backward_input(grad_out, weight, grad_x, g);
}

const DirectConvTiles& direct_conv_tiles(CpuIsa isa) {
#if defined(__x86_64__)
  if (isa >= CpuIsa::avx512_bf16) return direct_conv_tiles_avx512_bf16;
  if (isa >= CpuIsa::avx512) return direct_conv_tiles_avx512;
  if (isa >= CpuIsa::avx2) return direct_conv_tiles_avx2;
#endif
  return direct_conv_tiles_baseline;
}

}  // namespace kiln::cpu
