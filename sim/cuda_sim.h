// kiln's CUDA simulator, the kernel side: force-included (g++ -include kiln/sim/cuda_sim.h) when a
// .cu file is compiled as C++ by the host compiler, it supplies what nvcc would: the built-in
// variables, __shared__, barriers, warp collectives, atomics, fences and loads, and the launch
// (sim/kernel_macros.h). CUDA's own host headers give the qualifiers (__global__ and __device__
// expand to nothing), the vector types and __half/__nv_bfloat16 with host arithmetic; __CUDACC__
// stays undefined, as those headers then expect nvcc. docs/simulator.md says what is modelled.
#pragma once

#define KILN_CUDA_SIM 1

#include <cuda_runtime.h>
#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "kiln/sim/atomics.h"
#include "kiln/sim/device_api.h"
#include "kiln/sim/device_math.h"
#include "kiln/sim/kernel_macros.h"
#include "kiln/sim/launch.h"

#define threadIdx (static_cast<const ::uint3&>(::kiln::sim::current::thread_idx))
#define blockIdx (static_cast<const ::uint3&>(::kiln::sim::current::block_idx))
#define blockDim (static_cast<const ::dim3&>(::kiln::sim::current::block_dim))
#define gridDim (static_cast<const ::dim3&>(::kiln::sim::current::grid_dim))
// A variable, not a macro: cudaDeviceProp has a member of this name.
inline constexpr int warpSize = 32;

// One copy per worker thread, and a worker runs one block at a time: one copy per block in flight.
// It starts zeroed and then holds the previous block's values, as nothing clears it on a GPU
// either. Compiled with KILN_SIM_SERIAL, a plain static instead, and this file's grids run on one
// worker: AddressSanitizer checks the bounds of static variables but not of thread-local ones.
#undef __shared__
#if defined(KILN_SIM_SERIAL)
#define __shared__ static
#define KILN_SIM_SERIAL_GRIDS true
#else
#define __shared__ static thread_local
#define KILN_SIM_SERIAL_GRIDS false
#endif

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

inline void __syncthreads(std::source_location where = std::source_location::current()) {
  ::kiln::sim::block_barrier(where);
}

inline void __syncwarp(unsigned mask = 0xffffffffu,
                       std::source_location where = std::source_location::current()) {
  ::kiln::sim::warp_collective({::kiln::sim::WarpOp::sync, mask, 0, 0, warpSize}, where);
}

namespace kiln::sim {
// Shuffles move any trivially copyable value of up to 8 bytes in one collective, as the hardware
// moves the 64-bit overloads (in two 32-bit halves, which no lane can observe apart).
template <class T>
T shuffle(WarpOp op, unsigned mask, T var, int argument, int width,
          const std::source_location& where) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(std::uint64_t),
                "a shuffled value is copied bit for bit, at most 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  bits = warp_collective({op, mask, bits, argument, width}, where);
  std::memcpy(static_cast<void*>(&var), &bits, sizeof(T));
  return var;
}
}  // namespace kiln::sim

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize,
              std::source_location where = std::source_location::current()) {
  return ::kiln::sim::shuffle(::kiln::sim::WarpOp::shfl, mask, var, src_lane, width, where);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize,
                  std::source_location where = std::source_location::current()) {
  return ::kiln::sim::shuffle(::kiln::sim::WarpOp::shfl_xor, mask, var, lane_mask, width, where);
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                 std::source_location where = std::source_location::current()) {
  return ::kiln::sim::shuffle(::kiln::sim::WarpOp::shfl_up, mask, var, static_cast<int>(delta),
                              width, where);
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                   std::source_location where = std::source_location::current()) {
  return ::kiln::sim::shuffle(::kiln::sim::WarpOp::shfl_down, mask, var, static_cast<int>(delta),
                              width, where);
}

inline unsigned __ballot_sync(unsigned mask, int predicate,
                              std::source_location where = std::source_location::current()) {
  return static_cast<unsigned>(::kiln::sim::warp_collective(
      {::kiln::sim::WarpOp::ballot, mask, predicate != 0, 0, warpSize}, where));
}
inline int __any_sync(unsigned mask, int predicate,
                      std::source_location where = std::source_location::current()) {
  return static_cast<int>(::kiln::sim::warp_collective(
      {::kiln::sim::WarpOp::any, mask, predicate != 0, 0, warpSize}, where));
}
inline int __all_sync(unsigned mask, int predicate,
                      std::source_location where = std::source_location::current()) {
  return static_cast<int>(::kiln::sim::warp_collective(
      {::kiln::sim::WarpOp::all, mask, predicate != 0, 0, warpSize}, where));
}
