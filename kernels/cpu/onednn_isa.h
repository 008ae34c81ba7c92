// The ISA level oneDNN was capped to: kiln's (KILN_CPU_ISA, set_cpu_isa) at oneDNN's first use in
// the process, which the convolutions and the matrix products both go through. While kiln's level
// differs from it, neither runs oneDNN, so kiln's per-ISA tests compare kiln's own kernels.
#pragma once

#include "kiln/core/cpu_isa.h"

namespace kiln::cpu {

// Caps oneDNN on the first call; only in a build with oneDNN.
CpuIsa onednn_level();

}  // namespace kiln::cpu
