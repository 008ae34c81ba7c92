// The softmax lab's table (versions.h): version 0 first, each later one adding one idea.
#include <vector>

#include "kiln/kernels/cuda/lab/softmax/versions.h"

namespace kiln::lab {

const std::vector<SoftmaxVersion>& softmax_versions() {
  static const std::vector<SoftmaxVersion> versions = {
      {"v0_kiln", "kiln's softmax kernel, as the op calls it", softmax::v0_kiln},
      {"v1_three_pass", "a block per row: max, sum, normalise, a tree each",
       softmax::v1_three_pass},
      {"v2_online", "max and sum in one pass (online softmax)", softmax::v2_online},
      {"v3_warp_per_row", "a warp per row: shuffles only, no barrier", softmax::v3_warp_per_row},
      {"v4_block_vectorized", "the row held in registers, float4 loads: one read",
       softmax::v4_block_vectorized},
  };
  return versions;
}

}  // namespace kiln::lab
