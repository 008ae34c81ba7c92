// v4's and v5's per-thread loop (reduction/v4_grid_stride.cu explains it): a thread's share of
// elements [begin, end) of one row, kUnroll float4 loads issued before the first is added.
#pragma once

#include <cstdint>

#include "kiln/kernels/cuda/lab/reduction/tiling.h"

namespace kiln::lab::reduction {

// kVector: begin and end are multiples of 4 and src is 16-byte aligned.
template <bool kVector>
__device__ __forceinline__ float thread_sum(const float* __restrict__ src, int64_t begin,
                                            int64_t end) {
  float sum = 0.0f;
  if constexpr (kVector) {
    for (int64_t i = begin + int64_t{threadIdx.x} * kVectorWidth; i < end; i += kStepV4) {
      float4 q[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {  // every load issued first: kUnroll in flight
        const int64_t j = i + int64_t{u} * kThreads * kVectorWidth;
        q[u] = j < end ? *reinterpret_cast<const float4*>(src + j) : make_float4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) sum += (q[u].x + q[u].y) + (q[u].z + q[u].w);
    }
  } else {
    constexpr int kLoads = kUnroll * kVectorWidth;
    for (int64_t i = begin + threadIdx.x; i < end; i += int64_t{kThreads} * kLoads) {
      float q[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int64_t j = i + int64_t{u} * kThreads;
        q[u] = j < end ? src[j] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kLoads; ++u) sum += q[u];
    }
  }
  return sum;
}

}  // namespace kiln::lab::reduction
