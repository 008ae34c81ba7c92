// Combining one value per thread over a warp, and over the threads of a block's row: the one
// in-block reduction of every kernel that reduces (the reduction engine in reduction.cuh, softmax,
// cross_entropy, batch and layer norm, the nll scans in loss.cu), so a sum of the same values
// rounds the same way in each.
//
//   in a warp: an xor butterfly, lane i combining its value with lane i ^ 16's, then i ^ 8's, ...
//   then i ^ 1's. Lane 0 ends with the tree ((v0 . v16) . (v8 . v24)) . ..., each pair combined
//   as (own . other), exactly as a __shfl_down tree would leave it; every other lane ends with a
//   tree of the same values in its own order, the same bits when the combine is commutative bit
//   for bit (+ is).
//   over a row of several warps: each warp's total goes to shared memory and the row's warp 0
//   runs the butterfly once more over them, padded with the identity, so the warps too are
//   combined in a fixed tree; its lane 0 hands the result to the whole row.
//
// Nothing depends on timing, so a result repeats bit for bit from run to run. Only for .cu files.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kiln::cuda {

inline constexpr int kWarpSize = 32;

// Moves v from another lane: lane ^ lane_mask (shfl_xor), `lane` (shfl) or lane - delta (shfl_up,
// a lane below delta keeping its own). v may be any trivially copyable type (bool, u8, the
// engine's (value, index) pairs): it travels as 32-bit words, which is how __shfl_*_sync moves its
// 64-bit overloads too. All 32 lanes must call them.
template <class T, class Move>
__device__ __forceinline__ T shuffle_words(T v, Move move) {
  static_assert(std::is_trivially_copyable_v<T>, "a shuffled value is copied bit for bit");
  constexpr int kWords = static_cast<int>((sizeof(T) + sizeof(unsigned) - 1) / sizeof(unsigned));
  unsigned words[kWords] = {};
  std::memcpy(words, &v, sizeof(T));
#pragma unroll
  for (int k = 0; k < kWords; ++k) words[k] = move(words[k]);
  std::memcpy(&v, words, sizeof(T));
  return v;
}
template <class T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask) {
  return shuffle_words(v, [lane_mask](unsigned w) { return __shfl_xor_sync(~0u, w, lane_mask); });
}
template <class T>
__device__ __forceinline__ T shfl(T v, int lane) {
  return shuffle_words(v, [lane](unsigned w) { return __shfl_sync(~0u, w, lane); });
}
template <class T>
__device__ __forceinline__ T shfl_up(T v, unsigned delta) {
  return shuffle_words(v, [delta](unsigned w) { return __shfl_up_sync(~0u, w, delta); });
}

// The combines the kernels share.
struct Sum {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

// std::max(a, b), as the CPU's running max: a NaN b is dropped and a NaN a kept, so a max that
// starts at -inf and takes each element as b never becomes NaN (softmax and cross_entropy let a
// NaN element poison the sum of exponentials instead).
struct Max {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};

// combine over the warp; every lane gets a result (see the top of the file). All 32 lanes must
// call it.
template <class T, class Combine>
__device__ __forceinline__ T warp_allreduce(T v, Combine combine) {
#pragma unroll
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) v = combine(v, shfl_xor(v, mask));
  return v;
}

// Shared memory for row_allreduce: a slot for each warp of the block (at most 1024 threads, so 32)
// and one for each row's result. The result slots are apart from the partials so that a row may
// reduce again at once: no thread writes its next partial before the next call's first barrier,
// which every thread reaches only after reading the last result.
template <class T>
struct RowReduceSmem {
  T partial[kWarpSize];
  T result[kWarpSize];
};

// combine over the blockDim.x threads of each row (threadIdx.y) of the block, a one-dimensional
// block being one row; every thread of the row gets the same bits, lane 0's. `identity` pads the
// last step (combine(identity, x) == x). blockDim.x is a multiple of 32, so each row is whole
// warps; every thread of the block must call it, as it synchronises when rows have several warps.
template <class T, class Combine>
__device__ T row_allreduce(T v, Combine combine, T identity, RowReduceSmem<T>& smem) {
  v = warp_allreduce(v, combine);
  if (blockDim.x <= kWarpSize) return shfl(v, 0);
  const unsigned warps = blockDim.x / kWarpSize, lane = threadIdx.x % kWarpSize,
                 warp = threadIdx.x / kWarpSize;
  T* partial = smem.partial + threadIdx.y * warps;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_allreduce(lane < warps ? partial[lane] : identity, combine);
    if (lane == 0) smem.result[threadIdx.y] = v;
  }
  __syncthreads();
  return smem.result[threadIdx.y];
}

// Threads for a row of `count` elements that row_allreduce combines: about 4 elements a thread at
// least (below that the combine costs more than the loads it shares out), 32 to 512.
inline int row_threads(int64_t count) {
  int threads = kWarpSize;
  while (threads < 512 && static_cast<int64_t>(threads) * 4 < count) threads *= 2;
  return threads;
}

}  // namespace kiln::cuda
