// CUDA's atomics and fences for the simulator (included by sim/cuda_sim.h): std::atomic_ref with
// relaxed ordering, as CUDA's atomic functions are relaxed; fences are sequentially consistent.
// The overloads are CUDA's own (unsigned long long, not uint64_t), so a call that compiles here
// compiles under nvcc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace kiln::sim {
template <class T>
std::atomic_ref<T> atomic(T* address) {
  return std::atomic_ref<T>(*address);
}
template <class T, class F>
T atomic_update(T* address, F next) {
  std::atomic_ref<T> a(*address);
  T old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, next(old), std::memory_order_relaxed)) {
  }
  return old;
}
template <class T>
T atomic_cas(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value, std::memory_order_relaxed);
  return compare;
}
}  // namespace kiln::sim

#define KILN_SIM_ATOMIC_RMW(name, T, method)                                      \
  inline T name(T* address, T value) {                                            \
    return ::kiln::sim::atomic(address).method(value, std::memory_order_relaxed); \
  }
KILN_SIM_ATOMIC_RMW(atomicAdd, int, fetch_add)
KILN_SIM_ATOMIC_RMW(atomicAdd, unsigned, fetch_add)
KILN_SIM_ATOMIC_RMW(atomicAdd, unsigned long long, fetch_add)
KILN_SIM_ATOMIC_RMW(atomicAdd, float, fetch_add)
KILN_SIM_ATOMIC_RMW(atomicAdd, double, fetch_add)
KILN_SIM_ATOMIC_RMW(atomicSub, int, fetch_sub)
KILN_SIM_ATOMIC_RMW(atomicSub, unsigned, fetch_sub)
KILN_SIM_ATOMIC_RMW(atomicExch, int, exchange)
KILN_SIM_ATOMIC_RMW(atomicExch, unsigned, exchange)
KILN_SIM_ATOMIC_RMW(atomicExch, unsigned long long, exchange)
KILN_SIM_ATOMIC_RMW(atomicExch, float, exchange)
KILN_SIM_ATOMIC_RMW(atomicAnd, int, fetch_and)
KILN_SIM_ATOMIC_RMW(atomicAnd, unsigned, fetch_and)
KILN_SIM_ATOMIC_RMW(atomicAnd, unsigned long long, fetch_and)
KILN_SIM_ATOMIC_RMW(atomicOr, int, fetch_or)
KILN_SIM_ATOMIC_RMW(atomicOr, unsigned, fetch_or)
KILN_SIM_ATOMIC_RMW(atomicOr, unsigned long long, fetch_or)
KILN_SIM_ATOMIC_RMW(atomicXor, int, fetch_xor)
KILN_SIM_ATOMIC_RMW(atomicXor, unsigned, fetch_xor)
KILN_SIM_ATOMIC_RMW(atomicXor, unsigned long long, fetch_xor)
#undef KILN_SIM_ATOMIC_RMW

#define KILN_SIM_ATOMIC_MIN_MAX(T)                                                           \
  inline T atomicMin(T* address, T value) {                                                  \
    return ::kiln::sim::atomic_update(address,                                               \
                                      [value](T old) { return value < old ? value : old; }); \
  }                                                                                          \
  inline T atomicMax(T* address, T value) {                                                  \
    return ::kiln::sim::atomic_update(address,                                               \
                                      [value](T old) { return old < value ? value : old; }); \
  }
KILN_SIM_ATOMIC_MIN_MAX(int)
KILN_SIM_ATOMIC_MIN_MAX(unsigned)
KILN_SIM_ATOMIC_MIN_MAX(long long)
KILN_SIM_ATOMIC_MIN_MAX(unsigned long long)
#undef KILN_SIM_ATOMIC_MIN_MAX

inline int atomicCAS(int* address, int compare, int value) {
  return ::kiln::sim::atomic_cas(address, compare, value);
}
inline unsigned atomicCAS(unsigned* address, unsigned compare, unsigned value) {
  return ::kiln::sim::atomic_cas(address, compare, value);
}
inline unsigned long long atomicCAS(unsigned long long* address, unsigned long long compare,
                                    unsigned long long value) {
  return ::kiln::sim::atomic_cas(address, compare, value);
}
inline unsigned short atomicCAS(unsigned short* address, unsigned short compare,
                                unsigned short value) {
  return ::kiln::sim::atomic_cas(address, compare, value);
}

inline void __threadfence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
// A block's threads run on one OS thread and interleave only where they wait: the compiler's
// ordering is all a block-scope fence needs. Not a thread fence, which the strictness of
// sim/metrics/strict_memory.h would take for a device-scope one.
inline void __threadfence_block() {
  std::atomic_signal_fence(std::memory_order_seq_cst);
}
inline void __threadfence_system() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

// Cache-hinted loads: __ldcg (L2 only, what a flag another block writes needs) is a relaxed atomic
// load where the type allows one; CUDA's own headers declare the __half and __nv_bfloat16 forms.
template <class T>
T __ldcg(const T* address) {
  if constexpr (std::is_trivially_copyable_v<T> &&
                (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8))
    return std::atomic_ref<T>(*const_cast<T*>(address)).load(std::memory_order_relaxed);
  else
    return *address;
}
template <class T>
T __ldg(const T* address) {
  return *address;
}

// The shared window's address of a shared variable: shared memory is ordinary memory here.
inline std::size_t __cvta_generic_to_shared(const void* address) {
  return reinterpret_cast<std::uintptr_t>(address);
}
