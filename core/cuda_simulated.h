// Whether kiln's CUDA devices are the CUDA simulator's (KILN_CUDA=SIM, docs/simulator.md): its
// kernels then run on the CPU, streams are synchronous and event times are host times, so a test
// that measures asynchrony or GPU timing skips that case here and says why.
#pragma once

namespace kiln::cuda {

bool is_simulated();  // false in a build for real GPUs and in one without CUDA

}  // namespace kiln::cuda
