// cuda::is_simulated() and the simulator's launch counts: CMakeLists.txt defines
// KILN_CUDA_SIMULATED for core/cuda_runtime in a KILN_CUDA=SIM build, whose cudart is the
// simulator's (sim/runtime).
#include "kiln/core/cuda_simulated.h"

#if KILN_CUDA_SIMULATED
#include "kiln/sim/grid.h"
#endif

namespace kiln::cuda {

bool is_simulated() {
#if KILN_CUDA_SIMULATED
  return true;
#else
  return false;
#endif
}

SimulatedLaunches simulated_launches() {
#if KILN_CUDA_SIMULATED
  return {sim::grids_run(), sim::library_calls(), sim::launches_by_name()};
#else
  return {};
#endif
}

}  // namespace kiln::cuda
