// The softmax lab (docs/kernels/softmax.md): softmax over each row of a row-major f32 matrix
// [rows, cols], y = exp(x - max) / sum(exp(x - max)).
//
//   v0_kiln               kiln's own softmax kernel (kernels/cuda/softmax.cu), as the op calls it
//   v1_three_pass         a block per row: max, then sum of exp, then normalise: three reads
//   v2_online             the max and the sum in one pass (online softmax): two reads
//   v3_warp_per_row       a warp per row: the combines in shuffles, no barrier
//   v4_block_vectorized   a block per row holding it in registers, float4 loads: one read
//
// Bench: kiln-bench lab softmax --rows 65536 --cols 4096.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/kernels/cuda/lab/lab.h"

namespace kiln::lab {

struct SoftmaxArgs {
  const float* x = nullptr;  // [rows, cols] on the GPU
  float* y = nullptr;        // [rows, cols]
  int64_t rows = 0;
  int64_t cols = 0;
};

using SoftmaxVersion = LabVersion<SoftmaxArgs>;

// Version 0 first. Defined in CUDA builds only.
const std::vector<SoftmaxVersion>& softmax_versions();

namespace softmax {
void v0_kiln(const SoftmaxArgs& args);
void v1_three_pass(const SoftmaxArgs& args);
void v2_online(const SoftmaxArgs& args);
void v3_warp_per_row(const SoftmaxArgs& args);
void v4_block_vectorized(const SoftmaxArgs& args);
}  // namespace softmax

}  // namespace kiln::lab
