// Tensor-core GEMM v1: mma.sync with ldmatrix. The f32 GEMMs issue one FFMA per multiply-add; a
// tensor core does a 16 x 8 x 16 product (2048 multiply-adds) in one warp-wide instruction,
// mma.sync.aligned.m16n8k16, reading its operands from registers in a fixed fragment layout
// (mma.cuh). The block stages a 128 x 32 tile of A and a 32 x 128 tile of B in shared memory with
// 16-byte loads; each of its 8 warps owns a 64 x 32 piece of C, i.e. 4 x 4 tiles of 16 x 8, and
// per 16-wide step of k loads its fragments with ldmatrix, which reads four 8 x 8 matrices and
// hands each lane exactly the elements the fragment layout wants:
//
//   ldmatrix_x4(a[i], &a_tile[(row0 + 16 i + lane % 16) * stride + kk + lane / 16 * 8]);
//   ldmatrix_x4_trans(r, &b_tile[(kk + lane % 16) * stride + col0 + 8 j + lane / 16 * 8]);
//   mma_m16n8k16<T>(acc[i][j], a[i], b[j]);       // 16 of them per k step, 64 f32 accumulators
//
// B is stored [k][n] (row-major, as in memory) but mma wants it column-major: ldmatrix's .trans
// transposes each 8 x 8 matrix on the way. Each shared row is padded by 8 elements (16 bytes) so
// that the 8 rows one ldmatrix phase reads fall in 8 disjoint groups of banks (tiling.h).
//
// What it leaves: the loads go through registers, and the tensor cores wait while a tile loads:
// one stage, two barriers a step. v2 pipelines them.
//
// measured: not yet on a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/core/dtype.h"
#include "kiln/kernels/cuda/lab/gemm_tc/problem.h"
#include "kiln/kernels/cuda/lab/gemm_tc/tiling.h"
#include "kiln/kernels/cuda/lab/gemm_tc/versions.h"
#include "kiln/kernels/cuda/lab/gemm_tc/warp_mma.cuh"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::gemm_tc {

namespace {

constexpr TcTiling kT = kV1MmaLdmatrix;
static_assert(valid(kT) && kT.stages == 1);
constexpr int kThreads = threads(kT);
// Device code takes the tiling's arithmetic as constants.
constexpr int kAStride = a_stride(kT), kBStride = b_stride(kT);
constexpr int kAChunks = a_chunks_per_thread(kT), kBChunks = b_chunks_per_thread(kT);

template <class T>
__global__ void __launch_bounds__(kThreads)
    mma_ldmatrix_kernel(const T* __restrict__ a, const T* __restrict__ b, float* __restrict__ c,
                        int m, int n, int k) {
  __shared__ __align__(16) T a_tile[kT.bm * kAStride];  // [bm][bk + pad]
  __shared__ __align__(16) T b_tile[kT.bk * kBStride];  // [bk][bn + pad]
  const int block_row = blockIdx.y * kT.bm, block_col = blockIdx.x * kT.bn;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  WarpMma<kT, T> warp;
  for (int t = 0; t < k; t += kT.bk) {
    // 16-byte pieces (8 elements) of each row; past an edge, zeros. k and n are multiples of 8.
#pragma unroll
    for (int l = 0; l < kAChunks; ++l) {
      const int i = threadIdx.x + l * kThreads;
      const int row = i / (kT.bk / kChunkElements), col = i % (kT.bk / kChunkElements) * 8;
      const int global_row = block_row + row;
      *reinterpret_cast<uint4*>(&a_tile[row * kAStride + col]) =
          global_row < m && t + col < k
              ? *reinterpret_cast<const uint4*>(&a[int64_t{global_row} * k + t + col])
              : zero;
    }
#pragma unroll
    for (int l = 0; l < kBChunks; ++l) {
      const int i = threadIdx.x + l * kThreads;
      const int row = i / (kT.bn / kChunkElements), col = i % (kT.bn / kChunkElements) * 8;
      const int global_col = block_col + col;
      *reinterpret_cast<uint4*>(&b_tile[row * kBStride + col]) =
          t + row < k && global_col < n
              ? *reinterpret_cast<const uint4*>(&b[int64_t{t + row} * n + global_col])
              : zero;
    }
    __syncthreads();
    warp.multiply(a_tile, b_tile);
    __syncthreads();
  }
  warp.store(c, m, n, block_row, block_col);
}

template <class T>
void launch(const GemmTcArgs& args, const Grid& g) {
  KILN_LAUNCH(dim3(g.x, g.y), kThreads, 0, cuda::stream(), mma_ldmatrix_kernel<T>)
  (static_cast<const T*>(args.a), static_cast<const T*>(args.b), args.c, static_cast<int>(args.m),
   static_cast<int>(args.n), static_cast<int>(args.k));
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void v1_mma_ldmatrix(const GemmTcArgs& args) {
  const Grid g = grid(kT, args.m, args.n);
  check_problem("v1_mma_ldmatrix", args.a, args.b, args.c, args.dtype, args.m, args.n, args.k, g);
  if (args.m == 0 || args.n == 0) return;
  check_device("v1_mma_ldmatrix");
  if (args.dtype == DType::bf16)
    launch<__nv_bfloat16>(args, g);
  else
    launch<__half>(args, g);
}

}  // namespace kiln::lab::gemm_tc
