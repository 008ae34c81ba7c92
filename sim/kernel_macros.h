// The two kernel-side macros that read the same under nvcc and under kiln's CUDA simulator
// (sim/cuda_sim.h), so one kernel source serves both:
//
//   KILN_LAUNCH(grid, block, shared_bytes, stream, kernel)(args...)
//       nvcc: kernel<<<grid, block, shared_bytes, stream>>>(args...). The kernel comes last so a
//       template id with commas (softmax_rows_kernel<D, Acc, true>) passes as one argument.
//       simulator: the grid runs on the CPU (sim/launch.h) before the line returns.
//   KILN_DYNAMIC_SHARED(T, name);
//       declares `T* name`, the block's dynamic shared memory (the launch's shared_bytes), 16-byte
//       aligned. nvcc: CUDA's extern __shared__ array; simulator: a buffer of exactly that many
//       bytes, filled with 0xFF (NaN for floats) at the start of every block.
//
// KILN_DEVICE_CODE is defined where kernel code is compiled: by nvcc, or by the host compiler with
// the simulator's shim force-included. A file compiled by neither gets neither macro.
#pragma once

#if defined(__CUDACC__)
#define KILN_DEVICE_CODE 1
#define KILN_LAUNCH(grid, block, shared_bytes, stream, ...) \
  __VA_ARGS__<<<(grid), (block), (shared_bytes), (stream)>>>
#define KILN_DYNAMIC_SHARED(T, name)                                          \
  extern __shared__ __align__(16) unsigned char kiln_dynamic_shared_##name[]; \
  T* name = reinterpret_cast<T*>(kiln_dynamic_shared_##name)
#elif defined(KILN_CUDA_SIM)
#define KILN_DEVICE_CODE 1
#define KILN_LAUNCH(grid, block, shared_bytes, stream, ...)                   \
  ::kiln::sim::Launch(                                                        \
      #__VA_ARGS__, (grid), (block), (shared_bytes), (stream),                \
      [](auto... kiln_sim_arguments) { __VA_ARGS__(kiln_sim_arguments...); }, \
      KILN_SIM_SERIAL_GRIDS)
#define KILN_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::kiln::sim::dynamic_shared_memory())
#endif
