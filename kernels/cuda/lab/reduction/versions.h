// The reduction lab (docs/kernels/reduction.md): the sum of each row of a row-major f32 matrix
// [rows, cols]; a sum over a vector is rows == 1.
//
//   v0_cub            CUB: cub::DeviceReduce::Sum (rows == 1), cub::DeviceSegmentedReduce::Sum
//   v1_shared_tree    one element a thread, a tree in shared memory, a barrier a level
//   v2_warp_shuffle   the tree's last five levels in registers: warp shuffles, two barriers
//   v3_vectorized     one float4 a thread: a quarter of the load instructions
//   v4_grid_stride    several float4s in flight a thread, a fixed grid of ~2048 blocks: two passes
//   v5_one_pass       v4, where the last block of a row to finish adds the partials: one launch
//
// Bench: kiln-bench lab reduction --rows 1 --cols 268435456 (and --rows 65536 --cols 4096).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/kernels/cuda/lab/lab.h"

namespace kiln::lab {

struct ReductionArgs {
  const float* x = nullptr;  // [rows, cols] on the GPU, 16-byte aligned
  float* out = nullptr;      // [rows]
  int64_t rows = 0;
  int64_t cols = 0;
  // reduction_workspace_bytes(rows, cols) bytes on the GPU, zeroed once before the first run
  // (v5's counters must start at zero; v5 leaves them at zero).
  void* workspace = nullptr;
};

using ReductionVersion = LabVersion<ReductionArgs>;

// Version 0 first, then v1, v2, ... Defined in CUDA builds only.
const std::vector<ReductionVersion>& reduction_versions();
// The workspace of every version, CUB's temporary storage included.
size_t reduction_workspace_bytes(int64_t rows, int64_t cols);

namespace reduction {
void v0_cub(const ReductionArgs& args);
void v1_shared_tree(const ReductionArgs& args);
void v2_warp_shuffle(const ReductionArgs& args);
void v3_vectorized(const ReductionArgs& args);
void v4_grid_stride(const ReductionArgs& args);
void v5_one_pass(const ReductionArgs& args);
}  // namespace reduction

}  // namespace kiln::lab
