// Tensor-core GEMM v2: a multi-stage cp.async pipeline. In v1 every step loads a tile through
// registers, waits at a barrier, computes, waits again: the tensor cores idle during each load.
// Here shared memory holds kT.stages = 4 copies of the tiles, and the loads are cp.async: copies
// from global to shared memory that skip the registers and complete in the background, tracked in
// groups. Before step t computes, the tiles of steps t + 1 and t + 2 are already in flight, and
// step t issues step t + 3's:
//
//   for (s = 0; s < stages - 1; ++s) { load_async(s); commit(); }        // the prologue
//   for (t = 0; t < tiles; ++t) {
//     cp_async_wait<stages - 2>();  __syncthreads();   // step t's group has landed, for all
//     load_async(t + stages - 1);  commit();           // into the copy step t - 1 just freed
//     warp.multiply(stage t % stages);
//   }
//
// One barrier a step: it also says every warp is done with the copy the new loads overwrite.
// Edges are zero-filled by cp.async itself (a source size of 0 bytes). The four copies take 74 KiB
// of shared memory, past the 48 KiB a kernel gets without asking: the launcher raises the limit
// with cudaFuncSetAttribute.
//
// measured: not yet on a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <utility>

#include "kiln/core/cuda.h"
#include "kiln/core/cuda_check.h"
#include "kiln/core/dtype.h"
#include "kiln/kernels/cuda/lab/gemm_tc/mma.cuh"
#include "kiln/kernels/cuda/lab/gemm_tc/problem.h"
#include "kiln/kernels/cuda/lab/gemm_tc/tiling.h"
#include "kiln/kernels/cuda/lab/gemm_tc/versions.h"
#include "kiln/kernels/cuda/lab/gemm_tc/warp_mma.cuh"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::gemm_tc {

namespace {

constexpr TcTiling kT = kV2CpAsyncPipeline;
static_assert(valid(kT) && kT.stages >= 2);
constexpr int kThreads = threads(kT);
// Device code takes the tiling's arithmetic as constants.
constexpr int kAStride = a_stride(kT), kBStride = b_stride(kT);
constexpr int kAChunks = a_chunks_per_thread(kT), kBChunks = b_chunks_per_thread(kT);
constexpr int kStageElements = stage_elements(kT);

// Issues the cp.async copies of step `tile`'s A and B tiles into one stage.
template <class T>
__device__ __forceinline__ void load_async(const T* __restrict__ a, const T* __restrict__ b,
                                           T* a_tile, T* b_tile, int m, int n, int k, int block_row,
                                           int block_col, int tile) {
  const int t = tile * kT.bk;
#pragma unroll
  for (int l = 0; l < kAChunks; ++l) {
    const int i = threadIdx.x + l * kThreads;
    const int row = i / (kT.bk / kChunkElements), col = i % (kT.bk / kChunkElements) * 8;
    const bool inside = block_row + row < m && t + col < k;
    const T* src = inside ? &a[int64_t{block_row + row} * k + t + col] : a;
    cp_async_16(shared_address(&a_tile[row * kAStride + col]), src, inside);
  }
#pragma unroll
  for (int l = 0; l < kBChunks; ++l) {
    const int i = threadIdx.x + l * kThreads;
    const int row = i / (kT.bn / kChunkElements), col = i % (kT.bn / kChunkElements) * 8;
    const bool inside = t + row < k && block_col + col < n;
    const T* src = inside ? &b[int64_t{t + row} * n + block_col + col] : b;
    cp_async_16(shared_address(&b_tile[row * kBStride + col]), src, inside);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    cp_async_pipeline_kernel(const T* __restrict__ a, const T* __restrict__ b,
                             float* __restrict__ c, int m, int n, int k) {
  KILN_DYNAMIC_SHARED(T, stages);  // [stage][A tile, then B tile]
  const auto a_tile = [&](int s) { return stages + s * kStageElements; };
  const auto b_tile = [&](int s) { return stages + s * kStageElements + kT.bm * kAStride; };
  const int block_row = blockIdx.y * kT.bm, block_col = blockIdx.x * kT.bn;
  const int tiles = (k + kT.bk - 1) / kT.bk;
  WarpMma<kT, T> warp;
#pragma unroll
  for (int s = 0; s < kT.stages - 1; ++s) {
    if (s < tiles) load_async(a, b, a_tile(s), b_tile(s), m, n, k, block_row, block_col, s);
    cp_async_commit();  // an empty group past the last tile keeps the count of groups uniform
  }
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<kT.stages - 2>();
    __syncthreads();
    const int next = t + kT.stages - 1;
    if (next < tiles)
      load_async(a, b, a_tile(next % kT.stages), b_tile(next % kT.stages), m, n, k, block_row,
                 block_col, next);
    cp_async_commit();
    warp.multiply(a_tile(t % kT.stages), b_tile(t % kT.stages));
  }
  cp_async_wait<0>();
  warp.store(c, m, n, block_row, block_col);
}

// cudaFuncSetAttribute once per kernel and device: a raised limit stays with the function.
void allow_shared_bytes(const void* kernel, int bytes) {
  static std::mutex mutex;
  static std::set<std::pair<int, const void*>> done;
  const std::pair<int, const void*> key{cuda::current_device(), kernel};
  std::lock_guard<std::mutex> lock(mutex);
  if (done.count(key)) return;
  KILN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.insert(key);
}

template <class T>
void launch(const GemmTcArgs& args, const Grid& g) {
  allow_shared_bytes(reinterpret_cast<const void*>(&cp_async_pipeline_kernel<T>), shared_bytes(kT));
  KILN_LAUNCH(dim3(g.x, g.y), kThreads, shared_bytes(kT), cuda::stream(),
              cp_async_pipeline_kernel<T>)
  (static_cast<const T*>(args.a), static_cast<const T*>(args.b), args.c, static_cast<int>(args.m),
   static_cast<int>(args.n), static_cast<int>(args.k));
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void v2_cp_async_pipeline(const GemmTcArgs& args) {
  const Grid g = grid(kT, args.m, args.n);
  check_problem("v2_cp_async_pipeline", args.a, args.b, args.c, args.dtype, args.m, args.n, args.k,
                g);
  if (args.m == 0 || args.n == 0) return;
  check_device("v2_cp_async_pipeline");
  if (args.dtype == DType::bf16)
    launch<__nv_bfloat16>(args, g);
  else
    launch<__half>(args, g);
}

}  // namespace kiln::lab::gemm_tc
