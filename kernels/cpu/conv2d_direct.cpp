// f32 convolution without a column matrix.
//
// The layout, for stride 1. A chunk of images is copied once into a padded buffer, channel by
// channel. Each channel is a grid of rows `row_stride = W + gap_w` wide: gap_w zeros, then one
// input row. Images follow each other every `image_rows = H + gap_h` rows, after gap_h rows of
// zeros. One run of zeros thus pads two neighbours at once: the end of a row and the start of the
// next, the bottom of an image and the top of the next (for a 3x3 kernel with padding 1 both gaps
// are 1). Output (b, oh, ow) lives at position p = (b * image_rows + oh) * row_stride + ow, and
// kernel tap (c, ki, kj) reads its input at p + c * channel_stride + ki * dilation_h * row_stride
// + kj * dilation_w: one fixed offset per tap, so the "column matrix" of im2col is the padded
// buffer itself, read at K shifted offsets. The positions that fall on padding (ow >= OW,
// oh >= OH: about 7% of them at 28x28, 23% at 7x7) are computed too and thrown away.
//
// Stride s. Each input plane is split into its s x s phases (even rows and even columns, even
// rows and odd columns, ...), each packed as above. Output o then reads input s * o + e, which is
// phase e mod s at offset o + floor(e / s): again one fixed offset per tap, into the plane of
// the tap's phase. Phases no tap reads (three of the four of a 1x1 stride-2 shortcut) are not
// packed.
//
// The forward micro-kernel: a tile of 4 output channels x 3 vectors of positions (24 with AVX2's
// 8 floats, 48 with AVX-512's 16) held in 12 registers; per tap, three loads of the padded input
// and four broadcast weights feed 12 FMAs. The input gradient runs on it too: each stride x stride
// phase of grad_x is a stride-1 convolution of grad_out with the taps that land on that phase,
// flipped (direct_conv2d_backward_input, at the end of this file).
//
// The weight-gradient micro-kernel: grad_weight[o][k] = sum_p grad[o][p] * input[p + offset_k],
// the forward kernel turned around. grad is packed transposed, [p][16 output channels] with zeros
// at the padding positions; a tile of taps x 16 output channels keeps its 12 sums in registers
// and, per position, broadcasts one input value per tap against the 16 channels of grad. (Summing
// along positions instead, with 8-wide vectors of grad and input reduced at the end, ran at half
// this speed: 8 loads per 12 FMAs, a third of them split across cache lines.)
//
// The micro-kernels are compiled once per instruction set (conv2d_direct_tiles_impl.h) and the
// one core/cpu_isa.h chose is called through a table; this file, which packs the layout, splits
// the work and stores the tiles, is the same for all of them.
#include "kiln/kernels/cpu/conv2d_direct.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/core/half.h"

#include "kiln/kernels/cpu/conv2d_direct_tiles.h"
#include "kiln/kernels/cpu/convert.h"
#include "kiln/kernels/cpu/loops.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::cpu {

namespace {

// Copies n floats, n mostly below 32 (a row of a late-layer image, a run of a tile). A call to
// memmove per run cost about a sixth of the forward kernel's time at 7x7, and AVX2's masked
// store is microcoded on AMD cores, slower still, so short runs go 4 floats at a time with SSE,
// which every x86-64 has, and the tail one by one.
inline void copy_short(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__x86_64__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(dst + i, _mm_loadu_ps(src + i));
#endif
  for (; i < n; ++i) dst[i] = src[i];
}

constexpr int64_t kTileChannels = kDirectTileChannels;  // forward: output channels per tile
constexpr int64_t kTapBlock = 160;                      // forward: taps per pass over a tile
constexpr int64_t kOutputBlock = kDirectOutputBlock;    // weight gradient: channels per block
// Weight gradient: positions per pass; a block of packed grad (16 KB) stays in L1 while every
// tap block reads it.
constexpr int64_t kPositionBlock = 256;
// A chunk's padded input (and, for the weight gradient, its padded grad) is sized to stay in a
// 1 MiB L2 with room for the weights.
constexpr int64_t kChunkBytes = 256 * 1024;

int64_t round_up(int64_t n, int64_t m) {
  return (n + m - 1) / m * m;
}

// How one axis of the input maps onto the layout. A tap whose input offset along the axis is
// e = k * dilation - pad reads phase e mod stride of the input at plane offset floor(e / stride):
// output o reads input stride * (o + shift) + phase.
struct Axis {
  int64_t stride = 1;
  int64_t plane = 0;  // ceil(in / stride): the length of one phase
  int64_t gap = 0;    // zeros before each row (columns) or image (rows), shared with the previous
  int64_t pitch = 0;  // plane + gap
  int64_t lowest = 0, highest = 0;  // the taps' shifts
  std::vector<int64_t> phase_slot;  // [stride]: where a phase is packed, -1 when no tap reads it
  int64_t phases = 0;               // phases packed
};

int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

Axis axis_for(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad,
              int64_t dilation) {
  Axis a;
  a.stride = stride;
  a.plane = (in + stride - 1) / stride;
  a.phase_slot.assign(static_cast<size_t>(stride), -1);
  a.lowest = floor_div(-pad, stride);
  a.highest = floor_div((kernel - 1) * dilation - pad, stride);
  for (int64_t k = 0; k < kernel; ++k) {
    const int64_t e = k * dilation - pad;
    a.phase_slot[static_cast<size_t>(e - floor_div(e, stride) * stride)] = 0;
  }
  for (int64_t& slot : a.phase_slot)
    if (slot == 0) slot = a.phases++;
  // Zeros enough for the reads before the first input (-lowest), past the last one (the last
  // output's highest read minus the plane's end) and for the outputs to fit in the pitch.
  a.gap = std::max({int64_t{0}, -a.lowest, out - 1 + a.highest - (a.plane - 1), out - a.plane});
  a.pitch = a.plane + a.gap;
  return a;
}

struct Layout {
  Axis rows, cols;
  int64_t row_stride = 0;      // cols.pitch
  int64_t image_rows = 0;      // rows.pitch
  int64_t planes = 0;          // packed phase planes per input channel
  int64_t images = 0;          // per chunk, at most
  int64_t positions = 0;       // a full chunk's positions, rounded up to whole tiles
  int64_t channel_stride = 0;  // floats per packed phase plane
};

// Positions images [0, nb) of a chunk span: the ones that may hold an output.
int64_t used_positions(const Layout& l, int64_t nb) {
  return nb * l.image_rows * l.row_stride;
}

Layout layout_for(const Conv2dGeometry& g, int64_t images, int64_t tile_positions) {
  Layout l;
  l.rows = axis_for(g.in_h, g.out_h, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h);
  l.cols = axis_for(g.in_w, g.out_w, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w);
  l.row_stride = l.cols.pitch;
  l.image_rows = l.rows.pitch;
  l.planes = l.rows.phases * l.cols.phases;
  l.images = images;
  l.positions = round_up(used_positions(l, images), tile_positions);
  // A tile past the last image reads up to positions + the largest tap offset; the packed rows
  // end with the zeros below the last image.
  const int64_t reach = (l.rows.gap + l.rows.highest) * l.row_stride + l.cols.gap + l.cols.highest;
  const int64_t packed = (images * l.image_rows + l.rows.gap) * l.row_stride;
  l.channel_stride = round_up(std::max(l.positions + reach, packed), int64_t{16});
  return l;
}

// Images per chunk: as many as keep their packed input (and `extra_channels` output-sized
// planes, the weight gradient's packed grad) inside kChunkBytes.
int64_t images_per_chunk(const Conv2dGeometry& g, const Layout& one, int64_t extra_channels) {
  const int64_t floats =
      (g.in_channels * one.planes + extra_channels) * one.image_rows * one.row_stride;
  const int64_t bytes = std::max<int64_t>(1, floats * int64_t{sizeof(float)});
  return std::clamp<int64_t>(kChunkBytes / bytes, 1, std::max<int64_t>(g.batch, 1));
}

// Copies the columns of one phase of an input row into a packed row of cols.plane values, zero
// where the phase runs past the input.
void pack_row(const float* src, const Conv2dGeometry& g, const Axis& cols, int64_t phase,
              float* dst) {
  if (cols.stride == 1) {
    copy_short(src, dst, g.in_w);
    return;
  }
  const int64_t valid = std::max<int64_t>(0, (g.in_w - phase + cols.stride - 1) / cols.stride);
  const float* from = src + phase;
  if (cols.stride == 2) {
    // A constant stride lets the compiler vectorise the gather with shuffles.
    for (int64_t j = 0; j < valid; ++j) dst[j] = from[2 * j];
  } else {
    for (int64_t j = 0; j < valid; ++j) dst[j] = from[j * cols.stride];
  }
  std::fill(dst + valid, dst + cols.plane, 0.0f);
}

// The same for the bf16 kernels' elements: value(iw) gives the element of input column iw.
template <class E, class Value>
void pack_row_of(const Conv2dGeometry& g, const Axis& cols, int64_t phase, E* dst, Value&& value) {
  const int64_t valid = std::max<int64_t>(0, (g.in_w - phase + cols.stride - 1) / cols.stride);
  for (int64_t j = 0; j < valid; ++j) dst[j] = value(phase + j * cols.stride);
  std::fill(dst + valid, dst + cols.plane, E(0));
}

// Copies images [n0, n0 + nb) into the padded chunk layout described at the top: for each of the
// `channels` packed channels, each packed phase plane, each image, rows.gap zero rows then the
// plane's rows, each after cols.gap zeros. row(n, c, ih, phase, dst) writes the cols.plane
// elements of column phase `phase` of input row ih of packed channel c of image n.
template <class E, class Row>
void pack_input(int64_t channels, const Layout& l, int64_t in_h, int64_t n0, int64_t nb, E* chunk,
                Row&& row) {
  const int64_t gap_rows = l.rows.gap * l.row_stride;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t a = 0; a < l.rows.stride; ++a) {
      if (l.rows.phase_slot[a] < 0) continue;
      for (int64_t b = 0; b < l.cols.stride; ++b) {
        if (l.cols.phase_slot[b] < 0) continue;
        E* plane = chunk + ((c * l.rows.phases + l.rows.phase_slot[a]) * l.cols.phases +
                            l.cols.phase_slot[b]) *
                               l.channel_stride;
        E* line = plane;
        for (int64_t n = n0; n < n0 + nb; ++n) {
          std::fill(line, line + gap_rows, E(0));
          line += gap_rows;
          for (int64_t i = 0; i < l.rows.plane; ++i, line += l.row_stride) {
            std::fill(line, line + l.cols.gap, E(0));
            const int64_t ih = i * l.rows.stride + a;
            if (ih < in_h) {
              row(n, c, ih, b, line + l.cols.gap);
            } else {
              std::fill(line + l.cols.gap, line + l.row_stride, E(0));
            }
          }
        }
        std::fill(line, plane + l.channel_stride, E(0));
      }
    }
}

// The f32 input's rows.
auto f32_rows(const float* x, const Conv2dGeometry& g, const Layout& l) {
  return [x, &g, &l](int64_t n, int64_t c, int64_t ih, int64_t phase, float* dst) {
    pack_row(x + ((n * g.in_channels + c) * g.in_h + ih) * g.in_w, g, l.cols, phase, dst);
  };
}

// bf16 input rows, one channel per packed channel (the weight gradient's input).
auto bf16_rows(const BFloat16* x, const Conv2dGeometry& g, const Layout& l) {
  return [x, &g, &l](int64_t n, int64_t c, int64_t ih, int64_t phase, uint16_t* dst) {
    const BFloat16* src = x + ((n * g.in_channels + c) * g.in_h + ih) * g.in_w;
    pack_row_of(g, l.cols, phase, dst, [src](int64_t iw) { return src[iw].bits; });
  };
}

// bf16 input rows, channels 2c and 2c + 1 (zero past the last channel) as one 32-bit pair per
// column, the lower channel in the low half: the forward_bf16 kernel's taps.
auto bf16_pair_rows(const BFloat16* x, const Conv2dGeometry& g, const Layout& l) {
  return [x, &g, &l](int64_t n, int64_t c, int64_t ih, int64_t phase, uint32_t* dst) {
    const BFloat16* low = x + ((n * g.in_channels + 2 * c) * g.in_h + ih) * g.in_w;
    if (2 * c + 1 < g.in_channels) {
      const BFloat16* high = low + g.in_h * g.in_w;
      if (l.cols.stride == 1) {
        // The common case as a plain loop over the two rows, which the compiler vectorises.
        for (int64_t iw = 0; iw < g.in_w; ++iw)
          dst[iw] = uint32_t{low[iw].bits} | uint32_t{high[iw].bits} << 16;
        return;
      }
      pack_row_of(g, l.cols, phase, dst, [low, high](int64_t iw) {
        return uint32_t{low[iw].bits} | uint32_t{high[iw].bits} << 16;
      });
    } else {
      pack_row_of(g, l.cols, phase, dst, [low](int64_t iw) { return uint32_t{low[iw].bits}; });
    }
  };
}

// Copies grad_out of images [n0, n0 + nb) to the output positions of the layout, transposed
// per block of 16 output channels of a group: packed[(grp, block)][p][16], the 16 values one
// position's tile row loads. Zeros wherever p is not an output or the channel is past the
// group's last, so they add nothing.
void pack_grad(const float* grad, const Conv2dGeometry& g, const Layout& l, int64_t n0, int64_t nb,
               float* packed) {
  const int64_t og = g.out_channels / g.groups;
  const int64_t blocks = (og + kOutputBlock - 1) / kOutputBlock;
  const int64_t plane = g.out_h * g.out_w;
  // Written in position order, 64 bytes at a time: each cell gathers one value from each of the
  // block's 16 grad planes, which are read front to back.
  float* cell = packed;
  for (int64_t grp = 0; grp < g.groups; ++grp)
    for (int64_t block = 0; block < blocks; ++block) {
      const int64_t width = std::min(kOutputBlock, og - block * kOutputBlock);
      for (int64_t b = 0; b < nb; ++b) {
        const float* planes =
            grad + ((n0 + b) * g.out_channels + grp * og + block * kOutputBlock) * plane;
        for (int64_t oh = 0; oh < l.image_rows; ++oh)
          for (int64_t ow = 0; ow < l.row_stride; ++ow, cell += kOutputBlock) {
            int64_t j = 0;
            if (oh < g.out_h && ow < g.out_w)
              for (const float* src = planes + oh * g.out_w + ow; j < width; ++j)
                cell[j] = src[j * plane];
            std::fill(cell + j, cell + kOutputBlock, 0.0f);
          }
      }
    }
}

// The bf16 weight gradient's grad (one group): packed[block][p / 2][16][2], each cell the
// values of positions p and p + 1 for one output channel, over `positions` positions (even, at
// least the chunk's used ones); zeros where p is not an output or past the channels.
void pack_grad_pairs(const BFloat16* grad, const Conv2dGeometry& g, const Layout& l, int64_t n0,
                     int64_t nb, int64_t positions, uint16_t* packed) {
  const int64_t blocks = (g.out_channels + kOutputBlock - 1) / kOutputBlock;
  const int64_t plane = g.out_h * g.out_w;
  for (int64_t block = 0; block < blocks; ++block) {
    uint16_t* out = packed + block * positions * kOutputBlock;
    const int64_t width = std::min(kOutputBlock, g.out_channels - block * kOutputBlock);
    int64_t p = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const BFloat16* planes = grad + ((n0 + b) * g.out_channels + block * kOutputBlock) * plane;
      for (int64_t oh = 0; oh < l.image_rows; ++oh)
        for (int64_t ow = 0; ow < l.row_stride; ++ow, ++p) {
          uint16_t* cell = out + (p / 2) * 2 * kOutputBlock + (p % 2);
          int64_t j = 0;
          if (oh < g.out_h && ow < g.out_w)
            for (const BFloat16* src = planes + oh * g.out_w + ow; j < width; ++j)
              cell[2 * j] = src[j * plane].bits;
          for (; j < kOutputBlock; ++j) cell[2 * j] = 0;
        }
    }
    std::fill(out + p * kOutputBlock, out + positions * kOutputBlock, uint16_t{0});
  }
}

// offsets[grp * K + k]: where tap k = (c, ki, kj) of group grp reads, relative to the position.
std::vector<int64_t> tap_offsets(const Conv2dGeometry& g, const Layout& l) {
  const int64_t cg = g.in_channels / g.groups;
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(g.groups * cg * g.kernel_h * g.kernel_w));
  for (int64_t c = 0; c < g.in_channels; ++c)
    for (int64_t ki = 0; ki < g.kernel_h; ++ki)
      for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
        const int64_t eh = ki * g.dilation_h - g.pad_h, ew = kj * g.dilation_w - g.pad_w;
        const int64_t sh = floor_div(eh, l.rows.stride), sw = floor_div(ew, l.cols.stride);
        const int64_t plane =
            (c * l.rows.phases + l.rows.phase_slot[eh - sh * l.rows.stride]) * l.cols.phases +
            l.cols.phase_slot[ew - sw * l.cols.stride];
        offsets.push_back(plane * l.channel_stride + (l.rows.gap + sh) * l.row_stride + l.cols.gap +
                          sw);
      }
  return offsets;
}

// Tile rows [o0, o0 + rows) of a group's [Og, K] weight block, as [K][rows]: the four weights one
// tap multiplies sit side by side for the broadcasts.
std::vector<float> pack_weights(const float* weight, const Conv2dGeometry& g, int64_t k_size) {
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

// The same for forward_bf16 (one group): taps are (pair of channels, ki, kj), each weight the
// pair's two bf16 values, the lower channel's in the low half.
std::vector<uint32_t> pack_weights(const BFloat16* weight, const Conv2dGeometry& g,
                                   int64_t k_size) {
  const int64_t taps = g.kernel_h * g.kernel_w, k_full = g.in_channels * taps;
  std::vector<uint32_t> packed(static_cast<size_t>(g.out_channels * k_size));
  uint32_t* dst = packed.data();
  for (int64_t o0 = 0; o0 < g.out_channels; o0 += kTileChannels) {
    const int64_t rows = std::min<int64_t>(kTileChannels, g.out_channels - o0);
    for (int64_t k = 0; k < k_size; ++k) {
      const int64_t c = 2 * (k / taps), tap = k % taps;
      for (int64_t r = 0; r < rows; ++r) {
        const BFloat16* w = weight + (o0 + r) * k_full + c * taps + tap;
        *dst++ = uint32_t{w[0].bits} | (c + 1 < g.in_channels ? uint32_t{w[taps].bits} << 16 : 0u);
      }
    }
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
                   const Conv2dGeometry& g) {
  TileRuns runs;
  const int64_t end = std::min(p0 + tile_positions, used);
  for (int64_t p = p0; p < end;) {
    const int64_t row = p / l.row_stride, col = p - row * l.row_stride;
    const int64_t run_end = std::min(end, (row + 1) * l.row_stride);
    const int64_t b = row / l.image_rows, oh = row - b * l.image_rows;
    if (oh < g.out_h && col < g.out_w) {
      runs.tile_at[runs.count] = p - p0;
      runs.out_at[runs.count] = (b * g.out_channels * g.out_h + oh) * g.out_w + col;
      runs.length[runs.count] = std::min(run_end, row * l.row_stride + g.out_w) - p;
      ++runs.count;
    }
    p = run_end;
  }
  return runs;
}

// Copies a tile's `rows` output channels, from o_first on, to the outputs its runs hold, rounded
// to bf16 when the output is.
void store_tile(const float* tile, int64_t tile_positions, int64_t rows, const TileRuns& runs,
                int64_t plane, int64_t o_first, float* out_chunk) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < runs.count; ++i)
      copy_short(tile + r * tile_positions + runs.tile_at[i],
                 out_chunk + (o_first + r) * plane + runs.out_at[i], runs.length[i]);
}

void store_tile(const float* tile, int64_t tile_positions, int64_t rows, const TileRuns& runs,
                int64_t plane, int64_t o_first, BFloat16* out_chunk) {
  const auto to_bf16 = convert_kernels().f32_to_bf16;
  uint16_t* out = &out_chunk->bits;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < runs.count; ++i)
      to_bf16(tile + r * tile_positions + runs.tile_at[i],
              out + (o_first + r) * plane + runs.out_at[i], runs.length[i]);
}

// The thread's working buffer `slot` of E, grown to n elements and kept: a fresh allocation per
// call would be mmapped and page-faulted in again every time at these sizes.
template <class E = float>
E* thread_scratch(int slot, int64_t n) {
  thread_local std::vector<E> buffers[3];
  std::vector<E>& b = buffers[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

int64_t flops_per_image(const Conv2dGeometry& g) {
  return std::max<int64_t>(
      1, g.out_channels * (g.in_channels / g.groups) * g.kernel_h * g.kernel_w * g.out_h * g.out_w);
}

// The forward, f32 or bf16 (T): the bf16 one packs pairs of channels (one group only) and runs
// forward_bf16; both sum in f32 tiles.
template <class T>
void forward(const T* x, const T* weight, const T* bias, T* out, const Conv2dGeometry& g) {
  if (g.batch == 0 || g.out_channels == 0 || g.out_h <= 0 || g.out_w <= 0) return;
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
  const std::vector<E> weights = pack_weights(weight, g, k_size);
  std::vector<float> bias_f32;
  if (bias) bias_f32.assign(bias, bias + g.out_channels);
  const float* bias_sums = bias ? bias_f32.data() : nullptr;
  const int64_t out_image = g.out_channels * g.out_h * g.out_w;
  // Taps are taken in blocks of about 150 so that the input a tile reads for one block (a few
  // cache lines per tap) stays in L1 while every row block of the tile uses it.
  const int64_t k_blocks = std::max<int64_t>(1, (k_size + kTapBlock - 1) / kTapBlock);
  const int64_t k_block = (k_size + k_blocks - 1) / k_blocks;
  // Positions [p0, p0 + tile_positions) of group grp of the chunk at image n0, every output
  // channel, summed block by block into `tile` [og, tile_positions] and then copied to the
  // outputs.
  auto forward_position_tile = [&](int64_t n0, int64_t used, int64_t p0, int64_t grp,
                                   const E* chunk, float* tile) {
    const E* group_weights = weights.data() + grp * og * k_size;
    const int64_t* group_offsets = offsets.data() + grp * k_size;
    for (int64_t k0 = 0; k0 < k_size; k0 += k_block) {
      const int64_t kn = std::min(k_block, k_size - k0);
      for (int64_t o0 = 0; o0 < og; o0 += kTileChannels) {
        const int64_t rows = std::min<int64_t>(kTileChannels, og - o0);
        const float* row_bias = bias_sums ? bias_sums + grp * og + o0 : nullptr;
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
    const TileRuns runs = tile_runs(p0, tile_positions, used, l, g);
    store_tile(tile, tile_positions, og, runs, g.out_h * g.out_w, grp * og, out + n0 * out_image);
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

}  // namespace

void direct_conv2d_forward(const float* x, const float* weight, const float* bias, float* out,
                           const Conv2dGeometry& g) {
  forward(x, weight, bias, out, g);
}

bool direct_conv2d_takes_bf16(const Conv2dGeometry& g) {
  return g.groups == 1 && direct_conv_tiles().forward_bf16 != nullptr;
}

void direct_conv2d_forward(const BFloat16* x, const BFloat16* weight, const BFloat16* bias,
                           BFloat16* out, const Conv2dGeometry& g) {
  forward(x, weight, bias, out, g);
}

void direct_conv2d_backward_weight(const float* grad_out, const float* x, float* grad_weight,
                                   const Conv2dGeometry& g) {
  const int64_t og = g.out_channels / g.groups;
  const int64_t k_size = g.in_channels / g.groups * g.kernel_h * g.kernel_w;
  const int64_t weight_numel = g.out_channels * k_size;
  std::fill(grad_weight, grad_weight + weight_numel, 0.0f);
  if (g.batch == 0 || weight_numel == 0 || g.out_h <= 0 || g.out_w <= 0) return;
  const int64_t blocks = (og + kOutputBlock - 1) / kOutputBlock;  // per group
  const DirectConvTiles& kernels = direct_conv_tiles();
  const int64_t per = images_per_chunk(g, layout_for(g, 1, kernels.tile_positions),
                                       g.groups * blocks * kOutputBlock);
  const Layout l = layout_for(g, per, kernels.tile_positions);
  const std::vector<int64_t> offsets = tap_offsets(g, l);
  // Per thread, the sums [(grp, block)][K][16]: grad_weight transposed, blocked like packed grad.
  const int64_t sums_size = g.groups * blocks * k_size * kOutputBlock;
  parallel_for(g.batch, flops_per_image(g), [&](int64_t begin, int64_t end) {
    float* chunk = thread_scratch(0, g.in_channels * l.planes * l.channel_stride);
    float* grads = thread_scratch(1, g.groups * blocks * l.positions * kOutputBlock);
    float* sums = thread_scratch(2, sums_size);
    std::fill(sums, sums + sums_size, 0.0f);
    for (int64_t n0 = begin; n0 < end; n0 += per) {
      const int64_t nb = std::min(per, end - n0), used = used_positions(l, nb);
      pack_input(g.in_channels, l, g.in_h, n0, nb, chunk, f32_rows(x, g, l));
      pack_grad(grad_out, g, l, n0, nb, grads);
      // Blocks write disjoint sums, so a single image can split them across threads.
      parallel_for(g.groups * blocks, k_size * kOutputBlock * used, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t* group_offsets = offsets.data() + (i / blocks) * k_size;
          const float* grad = grads + i * used * kOutputBlock;
          float* block_sums = sums + i * k_size * kOutputBlock;
          for (int64_t p = 0; p < used; p += kPositionBlock)
            for (int64_t k0 = 0; k0 < k_size; k0 += kernels.weight_taps)
              kernels.weight(std::min<int64_t>(kernels.weight_taps, k_size - k0), grad, chunk,
                              group_offsets + k0, p, std::min(used, p + kPositionBlock),
                              block_sums + k0 * kOutputBlock);
        }
      });
    }
    // Each thread adds its sums into the shared gradient once, transposing them back to [O][K].
#pragma omp critical(kiln_direct_conv2d_backward_weight)
    for (int64_t o = 0; o < g.out_channels; ++o) {
      const int64_t grp = o / og, oo = o % og;
      const float* from =
          sums + (grp * blocks + oo / kOutputBlock) * k_size * kOutputBlock + oo % kOutputBlock;
      float* to = grad_weight + o * k_size;
      for (int64_t k = 0; k < k_size; ++k) to[k] += from[k * kOutputBlock];
    }
  });
}

void direct_conv2d_backward_weight(const BFloat16* grad_out, const BFloat16* x,
                                   BFloat16* grad_weight, const Conv2dGeometry& g) {
  const int64_t k_size = g.in_channels * g.kernel_h * g.kernel_w;
  const int64_t weight_numel = g.out_channels * k_size;
  std::vector<float> total(static_cast<size_t>(weight_numel), 0.0f);
  const DirectConvTiles& kernels = direct_conv_tiles();
  if (g.batch > 0 && weight_numel > 0 && g.out_h > 0 && g.out_w > 0) {
    const int64_t blocks = (g.out_channels + kOutputBlock - 1) / kOutputBlock;
    const int64_t per = images_per_chunk(g, layout_for(g, 1, kernels.tile_positions),
                                         blocks * kOutputBlock);
    const Layout l = layout_for(g, per, kernels.tile_positions);
    const std::vector<int64_t> offsets = tap_offsets(g, l);
    const int64_t sums_size = blocks * k_size * kOutputBlock;
    parallel_for(g.batch, flops_per_image(g), [&](int64_t begin, int64_t end) {
      uint16_t* chunk = thread_scratch<uint16_t>(0, g.in_channels * l.planes * l.channel_stride);
      uint16_t* grads = thread_scratch<uint16_t>(1, blocks * l.positions * kOutputBlock);
      float* sums = thread_scratch(2, sums_size);
      std::fill(sums, sums + sums_size, 0.0f);
      for (int64_t n0 = begin; n0 < end; n0 += per) {
        const int64_t nb = std::min(per, end - n0);
        // Positions go in pairs: an odd count gets one more, whose grad is zero.
        const int64_t used = round_up(used_positions(l, nb), 2);
        pack_input(g.in_channels, l, g.in_h, n0, nb, chunk, bf16_rows(x, g, l));
        pack_grad_pairs(grad_out, g, l, n0, nb, used, grads);
        parallel_for(blocks, k_size * kOutputBlock * used, [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) {
            const uint16_t* grad = grads + i * used * kOutputBlock;
            float* block_sums = sums + i * k_size * kOutputBlock;
            for (int64_t p = 0; p < used; p += kPositionBlock)
              for (int64_t k0 = 0; k0 < k_size; k0 += kernels.weight_taps)
                kernels.weight_bf16(std::min<int64_t>(kernels.weight_taps, k_size - k0), grad,
                                    chunk, offsets.data() + k0, p, std::min(used, p + kPositionBlock),
                                    block_sums + k0 * kOutputBlock);
          }
        });
      }
#pragma omp critical(kiln_direct_conv2d_backward_weight_bf16)
      for (int64_t o = 0; o < g.out_channels; ++o) {
        const float* from = sums + (o / kOutputBlock) * k_size * kOutputBlock + o % kOutputBlock;
        float* to = total.data() + o * k_size;
        for (int64_t k = 0; k < k_size; ++k) to[k] += from[k * kOutputBlock];
      }
    });
  }
  for (int64_t i = 0; i < weight_numel; ++i) grad_weight[i] = BFloat16(total[static_cast<size_t>(i)]);
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
  const bool strided = g.stride_h > 1 || g.stride_w > 1;
  if (strided) std::fill(grad_x, grad_x + g.batch * g.in_channels * image, T(0.0f));
  for (int64_t a = 0; a < std::min(g.stride_h, g.in_h); ++a)
    for (int64_t b = 0; b < std::min(g.stride_w, g.in_w); ++b) {
      const PhaseTaps rows = phase_taps(g.kernel_h, g.stride_h, g.pad_h, g.dilation_h, a);
      const PhaseTaps cols = phase_taps(g.kernel_w, g.stride_w, g.pad_w, g.dilation_w, b);
      if (rows.taps.empty() || cols.taps.empty()) continue;  // no tap reaches: stays zero
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
      if (!strided) {
        forward<T>(grad_out, taps.data(), nullptr, grad_x, t);
        continue;
      }
      // Each input phase is its own stride-1 convolution, computed whole and then spread out to
      // every stride-th row and column.
      std::vector<T> phase(static_cast<size_t>(t.batch * t.out_channels * t.out_h * t.out_w));
      forward<T>(grad_out, taps.data(), nullptr, phase.data(), t);
      const T* src = phase.data();
      for (int64_t nc = 0; nc < g.batch * g.in_channels; ++nc)
        for (int64_t i = 0; i < t.out_h; ++i) {
          T* dst = grad_x + nc * image + (i * g.stride_h + a) * g.in_w + b;
          for (int64_t j = 0; j < t.out_w; ++j) dst[j * g.stride_w] = *src++;
        }
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
