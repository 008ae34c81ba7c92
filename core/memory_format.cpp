#include "kiln/core/memory_format.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "kiln/core/error.h"

namespace kiln {

namespace {

// Channels-last order, from the fastest-moving dim to the slowest.
constexpr std::array<size_t, 4> kChannelsLastOrder{1, 3, 2, 0};

}  // namespace

const char* memory_format_name(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::contiguous:
      return "contiguous";
    case MemoryFormat::channels_last:
      return "channels_last";
    case MemoryFormat::preserve:
      return "preserve";
  }
  return "an unknown memory format";
}

Shape strides_for(const char* op, const Shape& shape, MemoryFormat format) {
  KILN_CHECK(format != MemoryFormat::preserve, ValueError,
             "{}: MemoryFormat::preserve names no layout of its own here; give contiguous or "
             "channels_last",
             op);
  if (format == MemoryFormat::contiguous) return contiguous_strides(shape);
  KILN_CHECK(shape.size() == 4, ShapeError,
             "{}: channels_last is a layout of 4-D [N, C, H, W] tensors, got shape {}", op,
             shape_str(shape));
  Shape strides(4);
  int64_t running = 1;
  for (size_t d : kChannelsLastOrder) {
    strides[d] = running;
    running *= std::max<int64_t>(shape[d], 1);
  }
  return strides;
}

bool is_channels_last_strides(const Shape& shape, const Shape& strides) {
  if (shape.size() != 4 || strides[1] == 0) return false;
  int64_t min = 0;
  for (size_t d : kChannelsLastOrder) {
    if (shape[d] == 0 || strides[d] < min) return false;
    // [N, 1, 1, 1] with equal strides, or an N11W slice: contiguous, by convention.
    if (d == 0 && min == strides[1]) return false;
    min = strides[d];
    if (shape[d] > 1) min *= shape[d];
  }
  return true;
}

bool is_dense_in(const Shape& shape, const Shape& strides, MemoryFormat format) {
  if (format == MemoryFormat::channels_last && shape.size() != 4) return false;
  if (shape_numel(shape) == 0) return true;
  int64_t expected = 1;
  const auto check = [&](size_t d) {
    if (shape[d] == 1) return true;
    if (strides[d] != expected) return false;
    expected *= shape[d];
    return true;
  };
  if (format == MemoryFormat::channels_last)
    return std::all_of(kChannelsLastOrder.begin(), kChannelsLastOrder.end(), check);
  for (size_t d = shape.size(); d-- > 0;)
    if (!check(d)) return false;
  return true;
}

}  // namespace kiln
