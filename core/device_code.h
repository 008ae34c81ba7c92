// KILN_DEVICE_CODE: defined where kernel code is compiled, by nvcc or by the host compiler with
// kiln's CUDA simulator's shim force-included (sim/cuda_sim.h defines KILN_CUDA_SIM), so a header
// shared by kernels and host code keeps its device-only parts (__device__ helpers, nvcc's limits)
// under the one macro, and the simulator compiles them as nvcc does. sim/kernel_macros.h defines
// the same macro for sources that include only the simulator.
#pragma once

#if defined(__CUDACC__) || defined(KILN_CUDA_SIM)
#define KILN_DEVICE_CODE 1
#endif
