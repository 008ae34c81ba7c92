// The PTX instructions of the tensor-core lab, one inline-asm wrapper each (sm_80 and later;
// trapping stubs when compiled for an older GPU, where problem.h refuses to launch):
//
//   ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16   four 8 x 8 matrices of 16-bit elements
//       from shared memory into the fragment layout mma wants; lane i gives the address of row
//       i % 8 of matrix i / 8, and gets two elements of each matrix (.trans: of its transpose);
//   mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}   D (16 x 8, f32) += A (16 x 16) . B (16 x 8),
//       A row-major and B column-major across the warp's registers: 4 registers of A, 2 of B and
//       4 accumulators a lane;
//   cp.async.cg.shared.global [dst], [src], 16, src_bytes   a 16-byte copy from global to shared
//       memory that does not pass through registers (bytes past src_bytes are zero-filled, so 0
//       fills a tile's edge with zeros); commit_group closes a group of them, wait_group N waits
//       until at most N groups are still in flight.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), with g = lane / 4 and
// t = lane % 4: A's registers hold rows g, g + 8, g, g + 8 at columns 2t and 2t + 1, plus 8 for
// the last two; B's hold rows (k) 2t, 2t + 1 and those plus 8, at column (n) g; the accumulators
// rows g, g, g + 8, g + 8 at columns 2t, 2t + 1, 2t, 2t + 1.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <source_location>
#include <type_traits>

#if defined(KILN_CUDA_SIM)
#include "kiln/sim/ptx.h"
#endif

namespace kiln::lab::gemm_tc {

#if defined(KILN_CUDA_SIM)
// The simulator runs the same wrappers on its emulation of the instructions (sim/ptx.h); a shared
// address is then a pointer.
using SharedAddress = sim::ptx::SharedAddress;

inline SharedAddress shared_address(const void* p) {
  return p;
}

inline void ldmatrix_x4(unsigned (&r)[4], SharedAddress address,
                        std::source_location where = std::source_location::current()) {
  sim::ptx::ldmatrix_x4(r, address, false, where);
}

inline void ldmatrix_x4_trans(unsigned (&r)[4], SharedAddress address,
                              std::source_location where = std::source_location::current()) {
  sim::ptx::ldmatrix_x4(r, address, true, where);
}

template <class T>
void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                  std::source_location where = std::source_location::current()) {
  sim::ptx::mma_m16n8k16(d, a, b, sim::ptx::mma_type<T>(), where);
}

inline void cp_async_16(SharedAddress dst, const void* src, bool valid) {
  sim::ptx::cp_async_16(const_cast<void*>(dst), src, valid ? 16 : 0);
}

inline void cp_async_commit() {
  sim::ptx::cp_async_commit();
}

template <int kGroupsInFlight>
void cp_async_wait() {
  sim::ptx::cp_async_wait(kGroupsInFlight);
}
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
// Built for a GPU older than Ampere (sm_75 in a multi-architecture build): the instructions do
// not exist there, and check_problem (problem.h) refuses to launch on such a GPU; these stubs
// only let the file compile for it, and trap if reached.
using SharedAddress = unsigned;

__device__ __forceinline__ SharedAddress shared_address(const void*) {
  __trap();
  return 0;
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&)[4], SharedAddress) {
  __trap();
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&)[4], SharedAddress) {
  __trap();
}
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&)[4], const unsigned (&)[4],
                                             const unsigned (&)[2]) {
  __trap();
}
__device__ __forceinline__ void cp_async_16(SharedAddress, const void*, bool) {
  __trap();
}
__device__ __forceinline__ void cp_async_commit() {
  __trap();
}
template <int kGroupsInFlight>
__device__ __forceinline__ void cp_async_wait() {
  __trap();
}
#else
using SharedAddress = unsigned;  // a shared-memory address, as the instructions take it

__device__ __forceinline__ SharedAddress shared_address(const void* p) {
  return static_cast<SharedAddress>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], SharedAddress address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], SharedAddress address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// d += a . b for one 16 x 8 x 16 tile; T is __nv_bfloat16 or __half.
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4],
                                             const unsigned (&b)[2]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    static_assert(std::is_same_v<T, __half>, "mma_m16n8k16 takes bf16 or f16");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// 16 bytes from src to shared memory at dst, or 16 zero bytes when !valid (src is then not read,
// but must still be a valid address).
__device__ __forceinline__ void cp_async_16(SharedAddress dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int kGroupsInFlight>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kGroupsInFlight) : "memory");
}

#endif

}  // namespace kiln::lab::gemm_tc
