#include "kiln/kernels/conv2d_graph_plan.h"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::conv2d_graph {

namespace {

// Dense strides of N, C, H, W-ordered dims: NCHW's row-major ones, or channels innermost.
TensorLayout dense(std::array<int64_t, 4> dims, MemoryFormat format) {
  const int64_t c = dims[1], h = dims[2], w = dims[3];
  TensorLayout t;
  t.dims = dims;
  if (format == MemoryFormat::channels_last)
    t.strides = {c * h * w, 1, w * c, c};
  else
    t.strides = {c * h * w, h * w, w, 1};
  return t;
}

}  // namespace

TensorLayout input_layout(const Conv2dGeometry& g, MemoryFormat format) {
  return dense({g.batch, g.in_channels, g.in_h, g.in_w}, format);
}

TensorLayout weight_layout(const Conv2dGeometry& g, MemoryFormat format) {
  // A grouped convolution is said by the filter alone: its C is in_channels / groups.
  return dense({g.out_channels, g.in_channels / g.groups, g.kernel_h, g.kernel_w}, format);
}

TensorLayout output_layout(const Conv2dGeometry& g, MemoryFormat format) {
  return dense({g.batch, g.out_channels, g.out_h, g.out_w}, format);
}

int64_t byte_alignment(uintptr_t address) {
  int64_t alignment = 1;
  while (alignment < 16 && address % static_cast<uintptr_t>(alignment * 2) == 0) alignment *= 2;
  return alignment;
}

DType compute_dtype(DType data) {
  return data == DType::f64 ? DType::f64 : DType::f32;
}

bool engine_allowed(DType data, const EngineNotes& notes, bool allow_tf32, bool deterministic) {
  if (notes.down_convert_inputs) return false;
  if (deterministic && notes.nondeterministic) return false;
  if (data == DType::f32 && !allow_tf32 && notes.tensor_core) return false;
  return true;
}

std::vector<int64_t> plan_key(const PlanKeyInputs& in) {
  std::vector<int64_t> key{static_cast<int64_t>(in.pass), in.device, static_cast<int64_t>(in.dtype),
                           static_cast<int64_t>(in.format)};
  const std::array<int64_t, 14> geometry = geometry_key(in.geometry);
  key.insert(key.end(), geometry.begin(), geometry.end());
  key.insert(key.end(), {in.alignments[0], in.alignments[1], in.alignments[2], in.allow_tf32,
                         in.deterministic, in.benchmark});
  return key;
}

std::string describe_problem(const Conv2dGeometry& g, MemoryFormat format, DType dtype,
                             int device) {
  return fmt::format(
      "input [{}, {}, {}, {}], weight [{}, {}, {}, {}], stride [{}, {}], padding [{}, {}], "
      "dilation [{}, {}], groups {}, {} {} on cuda:{}",
      g.batch, g.in_channels, g.in_h, g.in_w, g.out_channels, g.in_channels / g.groups, g.kernel_h,
      g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dilation_h, g.dilation_w, g.groups,
      memory_format_name(format), dtype_name(dtype), device);
}

}  // namespace kiln::conv2d_graph
