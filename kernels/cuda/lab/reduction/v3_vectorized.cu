// Reduction v3: vectorised loads. Each thread loads one float4 (16 bytes) instead of one float,
// so a block sums 1024 elements with a quarter of the load instructions, and a 2^28-element
// vector needs 2^18 blocks in its first pass instead of 2^20:
//
//   const float4 q = *reinterpret_cast<const float4*>(src + i);   // one LDG.E.128
//   v = (q.x + q.y) + (q.z + q.w);
//
// Why it should be faster: the memory system moves the same bytes, but each thread has four times
// the bytes in flight per instruction, fewer blocks are scheduled and the block combine (v2's)
// is paid once per 1024 elements. It needs every row and chunk to start on 16 bytes: a pass whose
// rows are not a multiple of 4 long takes the scalar path, four coalesced loads a thread. That
// includes a later pass whose number of partials is not a multiple of 4; the others (the workspace
// buffers start on 256 bytes) take float4s too, as both later passes of a 2^28-element vector do
// (2^18 and 256 partials).
//
// measured: not yet on a GPU.
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/lab/reduction/passes.h"
#include "kiln/kernels/cuda/lab/reduction/tiling.h"
#include "kiln/kernels/cuda/lab/reduction/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::reduction {

namespace {

template <bool kVector>
__global__ void __launch_bounds__(kThreads)
    vectorized_kernel(const float* x, float* out, int64_t rows, int64_t cols, int64_t chunk,
                      int64_t splits) {
  __shared__ cuda::RowReduceSmem<float> smem;
  for (int64_t block = blockIdx.x; block < rows * splits; block += gridDim.x) {
    const int64_t row = block / splits, begin = (block % splits) * chunk;
    const float* src = x + row * cols;
    float v = 0.0f;
    if constexpr (kVector) {
      // chunk and cols are multiples of 4, so a float4 is wholly inside the row or wholly out.
      const int64_t i = begin + int64_t{threadIdx.x} * kVectorWidth;
      if (i < cols) {
        const float4 q = *reinterpret_cast<const float4*>(src + i);
        v = (q.x + q.y) + (q.z + q.w);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kVectorWidth; ++j) {
        const int64_t i = begin + threadIdx.x + j * kThreads;
        if (i < cols) v += src[i];
      }
    }
    v = cuda::row_allreduce(v, cuda::Sum{}, 0.0f, smem);
    if (threadIdx.x == 0) out[block] = v;
  }
}

}  // namespace

void v3_vectorized(const ReductionArgs& args) {
  run_passes(args, chunked_passes(args.cols, kChunkV3),
             [&](const float* in, float* out, const Pass& pass) {
               const unsigned blocks = static_cast<unsigned>(pass_blocks(args.rows, pass));
               if (vector_aligned(in, pass))
                 KILN_LAUNCH(blocks, kThreads, 0, cuda::stream(), vectorized_kernel<true>)
               (in, out, args.rows, pass.cols, pass.chunk, pass.splits);
               else KILN_LAUNCH(blocks, kThreads, 0, cuda::stream(), vectorized_kernel<false>)(
                   in, out, args.rows, pass.cols, pass.chunk, pass.splits);
               KILN_CUDA_CHECK_LAUNCH();
             });
}

}  // namespace kiln::lab::reduction
