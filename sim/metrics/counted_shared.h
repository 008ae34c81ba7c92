// Force-included after sim/cuda_sim.h into a file compiled for the simulator's counting
// (kiln_sim_counted_sources, cmake/KilnCudaSim.cmake): __shared__ is constinit too, as CUDA allows
// no dynamic initialisation of __shared__. Otherwise GCC guards an array of __half or
// __nv_bfloat16 (trivial but not constexpr to construct) with a thread-local flag that every
// thread reads and each OS thread writes once: shared accesses a GPU never makes, and whose count
// would depend on the number of workers.
#pragma once

#if !defined(KILN_SIM_SERIAL)
#undef __shared__
#define __shared__ static thread_local constinit
#endif
