// Whether kiln's CUDA devices are the CUDA simulator's (KILN_CUDA=SIM, docs/simulator.md): its
// kernels then run on the CPU, streams are synchronous and event times are host times, so a test
// that measures asynchrony or GPU timing skips that case here and says why.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/sim/metrics/counts.h"

namespace kiln::cuda {

bool is_simulated();  // false in a build for real GPUs and in one without CUDA

// On the simulator, what this process has launched so far: kiln's kernels (grids run) and calls
// of the libraries (cuBLAS, cuDNN) whose work kiln's CPU kernels stand in for there, each of
// which launches at least one kernel on a GPU, both also by name (the kernel as its launch names
// it, "batch_norm_apply_kernel<T, P, kLast>", or the library call, "cudnn convolution forward").
// A training step's counts are the differences across it. Zeros where is_simulated() is false.
struct SimulatedLaunches {
  std::uint64_t kernels = 0;
  std::uint64_t library_calls = 0;
  std::map<std::string, std::uint64_t> by_name;
};
SimulatedLaunches simulated_launches();

// On the simulator, its counting (sim/metrics/counts.h, docs/simulator.md "Counting"): whether
// this build compiled anything for it (the kernel lab, unless KILN_SANITIZE), switching it on and
// off, and the counts since the last take, one entry a kernel. Elsewhere: false, nothing, and
// set_simulator_counting(true) throws.
bool simulator_can_count();
void set_simulator_counting(bool on);
std::vector<sim::KernelCounts> take_simulator_counts();

// On the simulator, whether its cuDNN stand-in sums the backward passes in an order that changes
// from call to call unless backends::cudnn_deterministic() is on (KILN_SIM_VARIED_SUMS, default
// on; docs/simulator.md "Strictness"), and switching it. Elsewhere: false, and switching it on
// throws.
bool simulator_varies_library_sums();
void set_simulator_varies_library_sums(bool on);

}  // namespace kiln::cuda
