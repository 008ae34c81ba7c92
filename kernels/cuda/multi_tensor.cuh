// Multi-tensor launches, as PyTorch's multi_tensor_apply: the addresses and sizes of many tensors
// travel in one kernel's parameters, so an update of a whole model's parameters takes a few
// launches instead of one or more per tensor. Each tensor is cut into chunks of kChunk elements;
// a block takes chunks grid-stride, and its threads walk a chunk with a block stride (coalesced).
// Only for .cu files (nvcc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::cuda {

inline constexpr int64_t kMultiTensorChunk = int64_t{kThreads} * 16;

// kLists parallel lists (parameter, gradient, state...) of up to kMax tensors. Keep
// sizeof(TensorLists) under the 4 KiB of kernel parameters every CUDA version passes.
template <int kLists, int kMax>
struct TensorLists {
  void* data[kLists][kMax];
  int64_t numel[kMax];
  int64_t first_chunk[kMax + 1];  // prefix sums of the chunk counts
  int count;
};

// The tensor a block's chunk c belongs to, and the chunk's element range in it. A block's chunks
// only increase, so its tensor index t only moves forward: pass the same t on every call.
template <int kLists, int kMax>
__device__ inline void chunk_range(const TensorLists<kLists, kMax>& lists, int64_t c, int& t,
                                   int64_t& begin, int64_t& end) {
  while (c >= lists.first_chunk[t + 1]) ++t;
  begin = (c - lists.first_chunk[t]) * kMultiTensorChunk;
  end = begin + kMultiTensorChunk < lists.numel[t] ? begin + kMultiTensorChunk : lists.numel[t];
}

// Fills TensorLists from `tensors` (kLists vectors of equal length; an empty vector leaves its
// list null) and calls launch(lists, chunks) for every kMax tensors; empty tensors are skipped.
template <int kLists, int kMax, class Launch>
void for_each_batch(const std::vector<const std::vector<Tensor>*>& tensors, Launch&& launch) {
  TensorLists<kLists, kMax> lists{};
  const size_t n = tensors[0]->size();
  for (size_t i = 0; i < n; ++i) {
    const int64_t numel = (*tensors[0])[i].numel();
    if (numel == 0) continue;
    for (int l = 0; l < kLists; ++l)
      lists.data[l][lists.count] = tensors[l]->empty() ? nullptr : (*tensors[l])[i].data_ptr();
    lists.numel[lists.count] = numel;
    lists.first_chunk[lists.count + 1] =
        lists.first_chunk[lists.count] + ceil_div(numel, kMultiTensorChunk);
    if (++lists.count == kMax) {
      launch(lists, lists.first_chunk[lists.count]);
      lists = TensorLists<kLists, kMax>{};
    }
  }
  if (lists.count > 0) launch(lists, lists.first_chunk[lists.count]);
}

}  // namespace kiln::cuda
