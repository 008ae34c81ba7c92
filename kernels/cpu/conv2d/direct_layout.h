// The padded layout of the direct convolution (conv2d/direct.cpp describes it), the packing of its
// input, and the buffers, shared by the forward (conv2d/direct.cpp) and the weight gradient
// (conv2d/direct_weight.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/core/half.h"
#include "kiln/kernels/conv2d.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::cpu::direct {

// A chunk's padded input (and its output sums or packed grad) is sized to stay in a 1 MiB L2
// with room for the weights.
inline constexpr int64_t kChunkBytes = 256 * 1024;

inline int64_t round_up(int64_t n, int64_t m) {
  return (n + m - 1) / m * m;
}

inline int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
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

struct Layout {
  Axis rows, cols;
  int64_t row_stride = 0;      // cols.pitch
  int64_t image_rows = 0;      // rows.pitch
  int64_t planes = 0;          // packed phase planes per input channel
  int64_t images = 0;          // per chunk, at most
  int64_t positions = 0;       // a full chunk's positions, rounded up to whole position tiles
  int64_t channel_stride = 0;  // elements per packed phase plane
};

// The layout of `images` images, its positions rounded up to whole tiles of `tile_positions`.
Layout layout_for(const Conv2dGeometry& g, int64_t images, int64_t tile_positions);

// Positions images [0, nb) of a chunk span: the ones that may hold an output.
inline int64_t used_positions(const Layout& l, int64_t nb) {
  return nb * l.image_rows * l.row_stride;
}

// Where output (b, oh, 0) of a chunk sits in the layout.
inline int64_t row_position(const Layout& l, int64_t b, int64_t oh) {
  return (b * l.image_rows + oh) * l.row_stride;
}

// Images per chunk: as many as keep their packed input and `extra_floats` more per image (output
// sums, packed grad) inside kChunkBytes.
int64_t images_per_chunk(const Conv2dGeometry& g, const Layout& one, int64_t extra_floats);

// offsets[grp * K + k]: where tap k = (c, ki, kj) of group grp reads, relative to the position.
std::vector<int64_t> tap_offsets(const Conv2dGeometry& g, const Layout& l);

int64_t flops_per_image(const Conv2dGeometry& g);

// Copies n floats, n mostly below 32 (a row of a late-layer image, a run of a tile). A call to
// memmove per run cost about a sixth of the forward kernel's time at 7x7, and AVX2's masked store
// is microcoded on AMD cores, slower still, so short runs go 4 floats at a time with SSE, which
// every x86-64 has, and the tail one by one.
inline void copy_short(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__x86_64__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(dst + i, _mm_loadu_ps(src + i));
#endif
  for (; i < n; ++i) dst[i] = src[i];
}

// Output channels grouped into blocks of `vectors` x `lanes` (a channel or weight tile's width);
// the last block has as many vectors as its channels need, its lanes past the last channel zero.
struct ChannelBlocks {
  int64_t count = 0;
  int64_t width = 0;   // channels of a full block
  int64_t padded = 0;  // channels of all the blocks together: the buffers' stride per group
  int64_t lanes = 0;
  int64_t channels = 0;
  int64_t first(int64_t block) const { return block * width; }
  // The block's vectors and its width in channels.
  int64_t vectors(int64_t block) const {
    return (std::min(width, channels - first(block)) + lanes - 1) / lanes;
  }
  int64_t width_of(int64_t block) const { return vectors(block) * lanes; }
};

ChannelBlocks channel_blocks(int64_t channels, int64_t vectors, int64_t lanes);

// Copies the elements [begin, begin + count) of one phase of an input row into a packed row of
// cols.plane elements, zero where the phase runs past the input: value(iw) is the element of
// input column iw.
template <class E, class Value>
void pack_row_of(int64_t in_w, const Axis& cols, int64_t phase, E* dst, Value&& value) {
  const int64_t valid = std::max<int64_t>(0, (in_w - phase + cols.stride - 1) / cols.stride);
  for (int64_t j = 0; j < valid; ++j) dst[j] = value(phase + j * cols.stride);
  std::fill(dst + valid, dst + cols.plane, E(0));
}

// Copies images [n0, n0 + nb) into the padded chunk layout: for each of the `channels` packed
// channels, each packed phase plane, each image, rows.gap zero rows then the plane's rows, each
// after cols.gap zeros. row(n, c, ih, phase, dst) writes the cols.plane elements of column phase
// `phase` of input row ih of packed channel c of image n.
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
inline auto f32_rows(const float* x, const Conv2dGeometry& g, const Layout& l) {
  return [x, &g, &l](int64_t n, int64_t c, int64_t ih, int64_t phase, float* dst) {
    const float* src = x + ((n * g.in_channels + c) * g.in_h + ih) * g.in_w;
    if (l.cols.stride == 1) {
      copy_short(src, dst, g.in_w);
    } else if (l.cols.stride == 2) {
      // A constant stride lets the compiler vectorise the gather with shuffles.
      const int64_t valid = (g.in_w - phase + 1) / 2;
      for (int64_t j = 0; j < valid; ++j) dst[j] = src[phase + 2 * j];
      std::fill(dst + valid, dst + l.cols.plane, 0.0f);
    } else {
      pack_row_of(g.in_w, l.cols, phase, dst, [src](int64_t iw) { return src[iw]; });
    }
  };
}

// bf16 input rows, one channel per packed channel (the weight gradient's input).
inline auto bf16_rows(const BFloat16* x, const Conv2dGeometry& g, const Layout& l) {
  return [x, &g, &l](int64_t n, int64_t c, int64_t ih, int64_t phase, uint16_t* dst) {
    const BFloat16* src = x + ((n * g.in_channels + c) * g.in_h + ih) * g.in_w;
    if (l.cols.stride == 1) {
      std::memcpy(dst, src, static_cast<size_t>(g.in_w) * sizeof(uint16_t));
    } else if (l.cols.stride == 2) {
      // A constant stride lets the compiler vectorise the gather with shuffles.
      const int64_t valid = (g.in_w - phase + 1) / 2;
      for (int64_t j = 0; j < valid; ++j) dst[j] = src[phase + 2 * j].bits;
      std::fill(dst + valid, dst + l.cols.plane, uint16_t{0});
    } else {
      pack_row_of(g.in_w, l.cols, phase, dst, [src](int64_t iw) { return src[iw].bits; });
    }
  };
}

// bf16 input rows, channels 2c and 2c + 1 (zero past the last channel) as one 32-bit pair per
// column, the lower channel in the low half: the bf16 forward kernels' taps.
inline auto bf16_pair_rows(const BFloat16* x, const Conv2dGeometry& g, const Layout& l) {
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
      if (l.cols.stride == 2) {
        const int64_t valid = (g.in_w - phase + 1) / 2;
        for (int64_t j = 0; j < valid; ++j) {
          const int64_t iw = phase + 2 * j;
          dst[j] = uint32_t{low[iw].bits} | uint32_t{high[iw].bits} << 16;
        }
        std::fill(dst + valid, dst + l.cols.plane, uint32_t{0});
        return;
      }
      pack_row_of(g.in_w, l.cols, phase, dst, [low, high](int64_t iw) {
        return uint32_t{low[iw].bits} | uint32_t{high[iw].bits} << 16;
      });
    } else {
      pack_row_of(g.in_w, l.cols, phase, dst, [low](int64_t iw) { return uint32_t{low[iw].bits}; });
    }
  };
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

}  // namespace kiln::cpu::direct
