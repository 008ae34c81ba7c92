// The entry points of GCC's ThreadSanitizer instrumentation (-fsanitize=thread), defined here in
// place of libtsan's: kiln_sim_counted_sources (cmake/KilnCudaSim.cmake) compiles kernel sources
// with the instrumentation and without the runtime, so that every load and store of device code
// calls these with its address, and counting (recorder.h) sees what the kernel touches. The
// atomics do their operation (sequentially consistent, at least as strong as asked) and count as
// atomic accesses. Not a race detector: no libtsan is linked, none of its checks run. The same
// accesses and the fences drive the strictness of strict_memory.h while a block runs.
#include <cstddef>
#include <cstdint>

#include "kiln/sim/metrics/recorder.h"
#include "kiln/sim/metrics/strict_memory.h"

namespace {

using kiln::sim::metrics::Kind;

// What an access is to the strictness of strict_memory.h.
enum class Strict { load, store, unheld_store, atomic };

inline void note(const volatile void* address, std::size_t bytes, Kind kind, const void* site,
                 Strict strict) {
  const void* a = const_cast<const void*>(address);
  if (kiln::sim::metrics::active)  // a counted block runs on this OS thread
    kiln::sim::metrics::record(a, bytes, kind, site);
  if (kiln::sim::strict::active) {  // a block runs with a strictness of strict_memory.h on
    switch (strict) {
      case Strict::load:
        kiln::sim::strict::load(a, bytes);
        break;
      case Strict::store:
        kiln::sim::strict::store(a, bytes);
        break;
      case Strict::unheld_store:
        kiln::sim::strict::unheld_store(a, bytes);
        break;
      case Strict::atomic:
        kiln::sim::strict::atomic(a, bytes);
        break;
    }
  }
}
inline void note(const volatile void* address, std::size_t bytes, Kind kind, const void* site) {
  note(address, bytes, kind, site,
       kind == Kind::load    ? Strict::load
       : kind == Kind::store ? Strict::store
                             : Strict::atomic);
}

}  // namespace

#define KILN_SITE __builtin_extract_return_addr(__builtin_return_address(0))

extern "C" {

void __tsan_init() {
  kiln::sim::metrics::note_counted_file();
}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}

#define KILN_ACCESS(bytes)                                        \
  void __tsan_read##bytes(void* p) {                              \
    note(p, bytes, Kind::load, KILN_SITE);                        \
  }                                                               \
  void __tsan_write##bytes(void* p) {                             \
    note(p, bytes, Kind::store, KILN_SITE);                       \
  }                                                               \
  void __tsan_unaligned_read##bytes(void* p) {                    \
    note(p, bytes, Kind::load, KILN_SITE);                        \
  }                                                               \
  void __tsan_unaligned_write##bytes(void* p) {                   \
    note(p, bytes, Kind::store, KILN_SITE);                       \
  }                                                               \
  void __tsan_volatile_read##bytes(void* p) {                     \
    note(p, bytes, Kind::load, KILN_SITE);                        \
  }                                                               \
  void __tsan_volatile_write##bytes(void* p) {                    \
    note(p, bytes, Kind::store, KILN_SITE, Strict::unheld_store); \
  }                                                               \
  void __tsan_unaligned_volatile_read##bytes(void* p) {           \
    note(p, bytes, Kind::load, KILN_SITE);                        \
  }                                                               \
  void __tsan_unaligned_volatile_write##bytes(void* p) {          \
    note(p, bytes, Kind::store, KILN_SITE, Strict::unheld_store); \
  }
KILN_ACCESS(1)
KILN_ACCESS(2)
KILN_ACCESS(4)
KILN_ACCESS(8)
KILN_ACCESS(16)
#undef KILN_ACCESS

void __tsan_read_range(void* p, std::size_t bytes) {
  note(p, bytes, Kind::load, KILN_SITE);
}
void __tsan_write_range(void* p, std::size_t bytes) {
  note(p, bytes, Kind::store, KILN_SITE);
}

// __threadfence and __threadfence_system (sim/atomics.h); __threadfence_block is a signal fence.
void __tsan_atomic_thread_fence(int) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (kiln::sim::strict::active) kiln::sim::strict::fence();
}
void __tsan_atomic_signal_fence(int) {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

// T: the operand type of one width (tsan's a8 .. a64).
#define KILN_ATOMICS(bits, T)                                                                      \
  T __tsan_atomic##bits##_load(const volatile T* a, int) {                                         \
    note(a, sizeof(T), Kind::atomic, KILN_SITE, Strict::load);                                     \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                                \
  void __tsan_atomic##bits##_store(volatile T* a, T v, int) {                                      \
    note(a, sizeof(T), Kind::atomic, KILN_SITE);                                                   \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                      \
  }                                                                                                \
  T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) {                                      \
    note(a, sizeof(T), Kind::atomic, KILN_SITE);                                                   \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                            \
  }                                                                                                \
  T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) {                                     \
    note(a, sizeof(T), Kind::atomic, KILN_SITE);                                                   \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                             \
  }                                                                                                \
  T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) {                                     \
    note(a, sizeof(T), Kind::atomic, KILN_SITE);                                                   \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                             \
  }                                                                                                \
  T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int) {                                     \
    note(a, sizeof(T), Kind::atomic, KILN_SITE);                                                   \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                             \
  }                                                                                                \
  T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int) {                                      \
    note(a, sizeof(T), Kind::atomic, KILN_SITE);                                                   \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                              \
  }                                                                                                \
  T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int) {                                     \
    note(a, sizeof(T), Kind::atomic, KILN_SITE);                                                   \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                             \
  }                                                                                                \
  T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int) {                                    \
    note(a, sizeof(T), Kind::atomic, KILN_SITE);                                                   \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                            \
  }                                                                                                \
  int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* expected, T v, int, int) {   \
    note(a, sizeof(T), Kind::atomic, KILN_SITE);                                                   \
    return __atomic_compare_exchange_n(a, expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
  }                                                                                                \
  int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* expected, T v, int, int) {     \
    note(a, sizeof(T), Kind::atomic, KILN_SITE);                                                   \
    return __atomic_compare_exchange_n(a, expected, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);  \
  }                                                                                                \
  T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T expected, T v, int, int) {         \
    note(a, sizeof(T), Kind::atomic, KILN_SITE);                                                   \
    __atomic_compare_exchange_n(a, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
    return expected;                                                                               \
  }
KILN_ATOMICS(8, char)
KILN_ATOMICS(16, short)
KILN_ATOMICS(32, int)
KILN_ATOMICS(64, long long)
#undef KILN_ATOMICS

}  // extern "C"
