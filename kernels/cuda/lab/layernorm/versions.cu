// The layer-norm lab's tables (versions.h): version 0 first, each later one adding one idea.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/kernels/cuda/lab/layernorm/tiling.h"
#include "kiln/kernels/cuda/lab/layernorm/versions.h"

namespace kiln::lab {

const std::vector<LayerNormForwardVersion>& layernorm_forward_versions() {
  static const std::vector<LayerNormForwardVersion> versions = {
      {"v0_kiln", "kiln's layer_norm kernel, as the op calls it", layernorm::v0_kiln},
      {"v1_naive", "a thread per row", layernorm::v1_naive},
      {"v2_warp_per_row", "a warp per row: coalesced loads, shuffle sums",
       layernorm::v2_warp_per_row},
      {"v3_vectorized", "a block per row held in registers, float4 loads: one read",
       layernorm::v3_vectorized},
  };
  return versions;
}

const std::vector<LayerNormBackwardVersion>& layernorm_backward_versions() {
  static const std::vector<LayerNormBackwardVersion> versions = {
      {"v0_reference", "a plain reference in double (kiln composes its backward from ops)",
       layernorm::v0_reference_backward},
      {"v1_naive", "a thread per row for dx, a thread per column for dweight and dbias",
       layernorm::v1_naive_backward},
      {"v2_warp_per_row", "a warp per row, per-block partials of dweight and dbias",
       layernorm::v2_warp_per_row_backward},
      {"v3_vectorized", "x_hat and dy in registers, dweight and dbias kept across rows",
       layernorm::v3_vectorized_backward},
  };
  return versions;
}

size_t layernorm_backward_workspace_bytes(int64_t rows, int64_t cols) {
  return std::max<size_t>(layernorm::backward_workspace_bytes(rows, cols), 256);
}

}  // namespace kiln::lab
