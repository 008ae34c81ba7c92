// The layer-norm lab (docs/kernels/layernorm.md): layer norm over each row of a row-major f32
// matrix [rows, cols], with weight and bias [cols], forward and backward (reference.h has the
// formulas).
//
//   forward                  backward
//   v0_kiln                  v0_reference         kiln's layer_norm kernel / a plain reference
//   v1_naive                 v1_naive             a thread per row (and a thread per column)
//   v2_warp_per_row          v2_warp_per_row      a warp per row; dweight and dbias from per-block
//                                                 partial sums
//   v3_vectorized            v3_vectorized        a block per row held in registers, float4 loads;
//                                                 the backward keeps its columns' dweight and dbias
//                                                 in registers across rows
//
// Bench: kiln-bench lab layernorm --rows 65536 --cols 4096.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/kernels/cuda/lab/lab.h"

namespace kiln::lab {

struct LayerNormForwardArgs {
  const float* x = nullptr;       // [rows, cols] on the GPU
  const float* weight = nullptr;  // [cols]
  const float* bias = nullptr;    // [cols]
  float* y = nullptr;             // [rows, cols]
  float* mean = nullptr;          // [rows]
  float* rstd = nullptr;          // [rows]: 1 / sqrt(var + eps), the biased variance
  int64_t rows = 0;
  int64_t cols = 0;
  float eps = 1e-5f;
};

struct LayerNormBackwardArgs {
  const float* x = nullptr;       // [rows, cols]
  const float* weight = nullptr;  // [cols]
  const float* mean = nullptr;    // [rows], as the forward wrote them
  const float* rstd = nullptr;    // [rows]
  const float* dy = nullptr;      // [rows, cols]
  float* dx = nullptr;            // [rows, cols]
  float* dweight = nullptr;       // [cols], overwritten
  float* dbias = nullptr;         // [cols], overwritten
  int64_t rows = 0;
  int64_t cols = 0;
  void* workspace = nullptr;  // layernorm_backward_workspace_bytes(rows, cols) bytes
};

using LayerNormForwardVersion = LabVersion<LayerNormForwardArgs>;
using LayerNormBackwardVersion = LabVersion<LayerNormBackwardArgs>;

// Version 0 first. Defined in CUDA builds only.
const std::vector<LayerNormForwardVersion>& layernorm_forward_versions();
const std::vector<LayerNormBackwardVersion>& layernorm_backward_versions();
size_t layernorm_backward_workspace_bytes(int64_t rows, int64_t cols);

namespace layernorm {
void v0_kiln(const LayerNormForwardArgs& args);
void v1_naive(const LayerNormForwardArgs& args);
void v2_warp_per_row(const LayerNormForwardArgs& args);
void v3_vectorized(const LayerNormForwardArgs& args);

void v0_reference_backward(const LayerNormBackwardArgs& args);
void v1_naive_backward(const LayerNormBackwardArgs& args);
void v2_warp_per_row_backward(const LayerNormBackwardArgs& args);
void v3_vectorized_backward(const LayerNormBackwardArgs& args);
}  // namespace layernorm

}  // namespace kiln::lab
