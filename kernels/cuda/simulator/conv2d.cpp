// The CUDA simulator's conv2d (KILN_CUDA=SIM, docs/simulator.md): cuDNN is not simulated, so in
// this build conv2d on a cuda device runs kiln's CPU kernels (kernels/cpu/conv2d.cpp) on the
// simulated device memory, which is host memory, in the CPU kernels' dtypes. Replaces
// kernels/cuda/conv2d.cpp in this build only (CMakeLists.txt).
#include "kiln/kernels/conv2d.h"

namespace kiln {

const Conv2dKernels* const Conv2dKernels::cuda = &Conv2dKernels::cpu;

}  // namespace kiln
