// How v1-v4 chain their passes (tiling.h): pass 1 reads x, each later pass reads the partials of
// the one before, passes alternate between the workspace's two partial buffers, and the last pass
// writes out. Host code shared by the versions' launchers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/kernels/cuda/lab/reduction/tiling.h"
#include "kiln/kernels/cuda/lab/reduction/versions.h"

namespace kiln::lab::reduction {

// Whether a pass may read its input as float4s: every row and every chunk starts on 16 bytes.
inline bool vector_aligned(const float* in, const Pass& pass) {
  return pass.cols % kVectorWidth == 0 && pass.chunk % kVectorWidth == 0 &&
         reinterpret_cast<uintptr_t>(in) % (sizeof(float) * kVectorWidth) == 0;
}

// launch(in, out, pass) for each pass, in order.
template <class Launch>
void run_passes(const ReductionArgs& args, const std::vector<Pass>& passes, Launch&& launch) {
  const WorkspaceLayout layout = workspace_layout(args.rows, args.cols);
  char* workspace = static_cast<char*>(args.workspace);
  float* const buffers[2] = {reinterpret_cast<float*>(workspace + layout.first_offset),
                             reinterpret_cast<float*>(workspace + layout.second_offset)};
  const float* in = args.x;
  for (size_t i = 0; i < passes.size(); ++i) {
    float* out = i + 1 == passes.size() ? args.out : buffers[i % 2];
    launch(in, out, passes[i]);
    in = out;
  }
}

// v5's per-row counters, at the start of the workspace.
inline unsigned* row_counters(const ReductionArgs& args) {
  return static_cast<unsigned*>(args.workspace);
}
// v5's first-pass partials.
inline float* first_partials(const ReductionArgs& args) {
  return reinterpret_cast<float*>(static_cast<char*>(args.workspace) +
                                  workspace_layout(args.rows, args.cols).first_offset);
}

}  // namespace kiln::lab::reduction
