// conv2d through cuDNN 9's graph (backend) API, the path PyTorch takes by default: one convolution
// node as an operation graph, engine configurations ranked by cuDNN's heuristics (mode A), an
// execution plan from the first allowed one that builds, run with a variant pack. The legacy path
// (kernels/cuda/conv2d/conv2d.cpp) stays the fallback, and the only includer.
#pragma once

#include <cudnn.h>

#include "kiln/core/dtype.h"
#include "kiln/core/memory_format.h"
#include "kiln/kernels/conv2d.h"
#include "kiln/kernels/conv2d_graph_plan.h"

namespace kiln::cuda {

// One pass of one convolution: x, w and y are conv2d's input, weight and output, whichever of them
// the pass writes (the gradient passes write into x or w and read the gradient from y).
struct GraphConvCall {
  const char* op;
  conv2d_graph::Pass pass;
  DType dtype;
  int device;
  MemoryFormat format;
  Conv2dGeometry geometry;
  void* x;
  void* w;
  void* y;
};

// cuDNN's name for a dtype (both paths): f32, f64, f16 or bf16, else a DTypeError naming `op`.
cudnnDataType_t cudnn_data_type(DType dtype, const char* op);

// Runs the pass through the graph API and answers true, or answers false having written nothing
// the caller relies on, when cuDNN refused this problem's graph, heuristics, every plan, or the
// execution: the caller then runs the legacy path, and every later call with the same problem on
// this thread answers false at once (counted once in backends::cudnn_api_counts().v9_fallbacks).
// An out-of-memory error for the workspace propagates, as on the legacy path.
bool run_conv2d_graph_api(const GraphConvCall& call);

}  // namespace kiln::cuda
