// The pure half of conv2d's cuDNN graph-API path (kernels/cuda/conv2d/graph_api.cpp): what its
// tensor descriptors say for each layout, the pointer alignment they promise, the type cuDNN
// computes in, which engines the backends:: switches allow, and the key of the plan cache (which
// the legacy path's cache uses too). Nothing here calls cuDNN, so the CPU tests check it on any
// machine.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/memory_format.h"
#include "kiln/kernels/conv2d.h"

namespace kiln::conv2d_graph {

enum class Pass { forward, backward_input, backward_weight };

// One 4-D operand as the graph API takes it: dimensions always in the logical order N, C, H, W
// (a filter's O, C/groups, kH, kW), and the strides of the memory layout in that same order. The
// layout is said only by the strides: NHWC is [C*H*W, 1, W*C, C].
struct TensorLayout {
  std::array<int64_t, 4> dims{}, strides{};
};
TensorLayout input_layout(const Conv2dGeometry& g, MemoryFormat format);
TensorLayout weight_layout(const Conv2dGeometry& g, MemoryFormat format);
TensorLayout output_layout(const Conv2dGeometry& g, MemoryFormat format);

// The largest power of two up to 16 that divides `address`: what a descriptor promises as
// CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT. 16-byte-aligned operands open the vectorized engines, so the
// promise is as large as the pointer allows, and the plan cache keys on it (as PyTorch's does).
int64_t byte_alignment(uintptr_t address);

// The type the convolution computes in (the descriptor's compute type): f64 for f64, f32 for f32,
// f16 and bf16 (their tensor-core engines accumulate in f32), as the legacy path sets it.
DType compute_dtype(DType data);

// What one engine's numerical notes say about it.
struct EngineNotes {
  bool tensor_core = false;          // CUDNN_NUMERICAL_NOTE_TENSOR_CORE: TF32 for f32 data
  bool down_convert_inputs = false;  // rounds inputs to a narrower type before computing
  bool nondeterministic = false;     // sums in an order that may change run to run
};

// Whether the switches let conv2d run an engine, PyTorch's filter (aten/src/ATen/native/cudnn/
// Conv_v8.cpp): never one that down-converts its inputs, no nondeterministic one under
// `deterministic`, and for f32 data no tensor-core (TF32) one unless `allow_tf32`. The graph API
// has no math-type switch: TF32 on or off is this filter.
bool engine_allowed(DType data, const EngineNotes& notes, bool allow_tf32, bool deterministic);

// Everything a cached algorithm choice or plan depends on: the pass, device, dtype, layout,
// every size of the geometry, the operands' byte alignments (the legacy path passes zeros: its
// descriptors promise none) and the three switches.
struct PlanKeyInputs {
  Pass pass = Pass::forward;
  int device = 0;
  DType dtype = DType::f32;
  MemoryFormat format = MemoryFormat::contiguous;
  Conv2dGeometry geometry;
  std::array<int64_t, 3> alignments{};  // x, w, y
  bool allow_tf32 = false, deterministic = false, benchmark = false;
};
std::vector<int64_t> plan_key(const PlanKeyInputs& in);

// "input [N, C, H, W], weight [...], stride [...], ..., channels_last f16 on cuda:0": the problem
// as error messages of both cuDNN paths name it.
std::string describe_problem(const Conv2dGeometry& g, MemoryFormat format, DType dtype, int device);

}  // namespace kiln::conv2d_graph
