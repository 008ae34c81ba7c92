// The reduction lab's table (versions.h): version 0 first, each later one adding one idea.
#include <vector>

#include "kiln/kernels/cuda/lab/reduction/versions.h"

namespace kiln::lab {

const std::vector<ReductionVersion>& reduction_versions() {
  static const std::vector<ReductionVersion> versions = {
#ifdef KILN_CUDA_SIM
      // The CUDA simulator runs no library (kernels/cuda/simulator/lab_library_versions.cpp).
      {"v0_cpu_reference", "simulator: the CPU reference in place of CUB", reduction::v0_cub},
#else
      {"v0_cub", "CUB's DeviceReduce / DeviceSegmentedReduce (the library)", reduction::v0_cub},
#endif
      {"v1_shared_tree", "one element a thread, a tree in shared memory",
       reduction::v1_shared_tree},
      {"v2_warp_shuffle", "warp shuffles for the tree's last five levels",
       reduction::v2_warp_shuffle},
      {"v3_vectorized", "one float4 a thread", reduction::v3_vectorized},
      {"v4_grid_stride", "several float4s in flight a thread, a fixed grid of ~2048 blocks",
       reduction::v4_grid_stride},
      {"v5_one_pass", "the last block of a row adds the partials: one launch",
       reduction::v5_one_pass},
  };
  return versions;
}

}  // namespace kiln::lab
