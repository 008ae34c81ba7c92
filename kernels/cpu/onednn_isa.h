// What kiln's two users of oneDNN, the convolutions and the matrix products, share: the ISA level
// oneDNN was capped to, kiln's (KILN_CPU_ISA, set_cpu_isa) at oneDNN's first use in the process
// (while kiln's level differs from it, neither runs oneDNN, so kiln's per-ISA tests compare
// kiln's own kernels), and the CPU engine.
#pragma once

#include "kiln/core/cpu_isa.h"

namespace dnnl {
struct engine;
}  // namespace dnnl

namespace kiln::cpu {

// oneDNN's CPU engine, made on first use; only in a build with oneDNN.
const dnnl::engine& onednn_engine();

// Caps oneDNN on the first call; only in a build with oneDNN.
CpuIsa onednn_level();

}  // namespace kiln::cpu
