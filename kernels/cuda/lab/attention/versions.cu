// The attention lab's tables (versions.h): version 0 first, each later one adding one idea.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/kernels/cuda/lab/attention/tiling.h"
#include "kiln/kernels/cuda/lab/attention/versions.h"

namespace kiln::lab {

const std::vector<AttentionVersion>& attention_forward_versions() {
  static const std::vector<AttentionVersion> versions = {
      {"v0_kiln", "the kernels of kiln's scaled_dot_product_attention: matmul, softmax",
       attention::v0_kiln},
      {"v1_naive", "three kernels: scores, softmax, P V; the L x S matrix in memory",
       attention::v1_naive},
      {"v2_fused_row", "one kernel, a warp per query row, online softmax: no L x S matrix",
       attention::v2_fused_row},
      {"v3_tiled_fa1", "K/V tiles in shared memory, FlashAttention-1's loop order",
       attention::v3_tiled_fa1},
  };
  return versions;
}

const std::vector<AttentionVersion>& attention_tc_versions() {
  static const std::vector<AttentionVersion> versions = {
      {"v0_kiln_f32", "v0_kiln on the inputs' values in f32", attention::v0_kiln},
      {"v4_mma_fa2", "mma.sync + ldmatrix, FlashAttention-2's split: each warp owns 16 queries",
       attention::v4_mma_fa2},
  };
  return versions;
}

const std::vector<AttentionBackwardVersion>& attention_backward_versions() {
  static const std::vector<AttentionBackwardVersion> versions = {
      {"v0_kiln", "the kernels kiln's autograd runs for the composed op (matmuls, softmax)",
       attention::v0_kiln_backward},
      {"v1_recompute", "P recomputed from the saved lse: a warp per key row, one per query row",
       attention::v1_recompute_backward},
      {"v5_tiled", "FlashAttention-2's backward: a block per key tile, each score once, dQ atomics",
       attention::v5_tiled_backward},
  };
  return versions;
}

size_t attention_workspace_bytes(int64_t batch_heads, int64_t l, int64_t s) {
  return attention::workspace_bytes(batch_heads, l, s);
}

size_t attention_row_workspace_bytes(int64_t batch_heads, int64_t l) {
  return attention::row_workspace_bytes(batch_heads, l);
}

}  // namespace kiln::lab
