// cuda::is_simulated() and the simulator's launch counts: CMakeLists.txt defines
// KILN_CUDA_SIMULATED for core/cuda_runtime in a KILN_CUDA=SIM build, whose cudart is the
// simulator's (sim/runtime).
#include <stdexcept>
#include <vector>

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

bool simulator_can_count() {
#if KILN_CUDA_SIMULATED
  return sim::counted_files() > 0;
#else
  return false;
#endif
}

void set_simulator_counting(bool on) {
#if KILN_CUDA_SIMULATED
  sim::set_counting(on);
#else
  if (on) throw std::logic_error("cuda::set_simulator_counting: this build has no simulator");
#endif
}

std::vector<sim::KernelCounts> take_simulator_counts() {
#if KILN_CUDA_SIMULATED
  return sim::take_counts();
#else
  return {};
#endif
}

bool simulator_varies_library_sums() {
#if KILN_CUDA_SIMULATED
  return sim::schedule().varied_library_sums;
#else
  return false;
#endif
}

void set_simulator_varies_library_sums(bool on) {
#if KILN_CUDA_SIMULATED
  sim::Schedule s = sim::schedule();
  s.varied_library_sums = on;
  sim::set_schedule(s);
#else
  if (on)
    throw std::logic_error("cuda::set_simulator_varies_library_sums: this build has no simulator");
#endif
}

}  // namespace kiln::cuda
