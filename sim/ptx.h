// kiln's CUDA simulator: the tensor-core PTX of the kernel lab (kernels/cuda/lab/gemm_tc/mma.cuh),
// emulated from the PTX ISA's documented layouts ("Matrix fragments for mma.m16n8k16 with
// floating point type", "ldmatrix", "cp.async", "cp.async.wait_group"). Included by mma.cuh when
// the simulator compiles it, in place of the inline asm.
//
// ldmatrix and mma.sync are warp collectives (.sync.aligned: all 32 lanes, the same call): each
// lane puts its operands (an address, or its A and B registers) in the warp's slots, waits at a
// warp barrier, computes its own results from the other lanes' slots, and waits again before the
// slots can be reused. With g = lane / 4 and t = lane % 4:
//   ldmatrix .x4: lane l gives the address of row l % 8 of matrix l / 8; register i of lane l gets
//     row g, columns 2t and 2t + 1 of matrix i (.trans: rows 2t and 2t + 1 at column g);
//   mma.m16n8k16.row.col: A(r, k) is half k % 2 of register (r >= 8) + 2 (k >= 8) of lane
//     4 (r % 8) + (k % 8) / 2; B(k, n) half k % 2 of register (k >= 8) of lane 4 n + (k % 8) / 2;
//     the lane's accumulator i is D(g + 8 (i >= 2), 2t + (i & 1)).
// The products of 16-bit values are exact in f32; the sum runs in k order in f32 (the hardware's
// order is not documented, so results may differ from a GPU's in the last bits).
//
// cp.async copies wait in the issuing thread's queue and land only at the cp.async.wait_group that
// must see them (the latest legal moment); the destination holds 0xFF bytes (NaN) from the issue
// until then, so a kernel that reads it before its wait reads NaN instead of a GPU's lucky timing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <type_traits>

namespace kiln::sim::ptx {

using SharedAddress = const void*;

void ldmatrix_x4(unsigned (&r)[4], SharedAddress address, bool transposed,
                 const std::source_location& where);

enum class MmaType : std::uint8_t { f16, bf16 };
void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], MmaType type,
                  const std::source_location& where);

template <class T>
constexpr MmaType mma_type() {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>,
                "mma_m16n8k16 takes bf16 or f16");
  return std::is_same_v<T, __half> ? MmaType::f16 : MmaType::bf16;
}

// cp.async.cg.shared.global [dst], [src], 16, src_bytes.
void cp_async_16(void* dst, const void* src, unsigned src_bytes);
void cp_async_commit();
// cp.async.wait_group n: every committed group but the newest n has landed.
void cp_async_wait(int groups_in_flight);

}  // namespace kiln::sim::ptx
