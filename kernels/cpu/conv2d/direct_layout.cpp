#include "kiln/kernels/cpu/conv2d/direct_layout.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::cpu::direct {

namespace {

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

}  // namespace

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

int64_t images_per_chunk(const Conv2dGeometry& g, const Layout& one, int64_t extra_floats) {
  const int64_t floats =
      g.in_channels * one.planes * one.image_rows * one.row_stride + extra_floats;
  const int64_t bytes = std::max<int64_t>(1, floats * int64_t{sizeof(float)});
  return std::clamp<int64_t>(kChunkBytes / bytes, 1, std::max<int64_t>(g.batch, 1));
}

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

int64_t flops_per_image(const Conv2dGeometry& g) {
  return std::max<int64_t>(
      1, g.out_channels * (g.in_channels / g.groups) * g.kernel_h * g.kernel_w * g.out_h * g.out_w);
}

ChannelBlocks channel_blocks(int64_t channels, int64_t vectors, int64_t lanes) {
  ChannelBlocks b;
  b.lanes = lanes;
  b.channels = channels;
  b.width = vectors * lanes;
  b.count = (channels + b.width - 1) / b.width;
  b.padded = b.count == 0 ? 0 : b.first(b.count - 1) + b.width_of(b.count - 1);
  return b;
}

}  // namespace kiln::cpu::direct
