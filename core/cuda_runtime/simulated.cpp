// cuda::is_simulated(): CMakeLists.txt defines KILN_CUDA_SIMULATED for core/cuda_runtime in a
// KILN_CUDA=SIM build, whose cudart is the simulator's (sim/runtime).
#include "kiln/core/cuda_simulated.h"

namespace kiln::cuda {

bool is_simulated() {
#if KILN_CUDA_SIMULATED
  return true;
#else
  return false;
#endif
}

}  // namespace kiln::cuda
