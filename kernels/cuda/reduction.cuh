// The reduction engine (nvcc only): reduces any set of dims of a strided tensor without copying
// it, for reduce.cu (sum, mean) and reduce_minmax.cu (max and min with the index of the first).
// make_plan sees the input as a matrix [outputs, count]: the kept dims (row-major, as the output is
// laid out) by the reduced dims (row-major in their logical order), each list merged where
// neighbours are contiguous with each other. reduce() then runs one of two kernels:
//
//   row_kernel:    blockDim.x threads share an output (row_threads: wider rows get more threads),
//                  blockDim.y outputs a block, combined with row_allreduce (block_reduce.cuh):
//                  when the reduced elements are innermost in memory, neighbouring threads read
//                  neighbouring elements.
//   column_kernel: when the innermost kept dim is contiguous and the reduced elements are not,
//                  32 neighbouring outputs a block along x, so a warp reads 32 neighbouring
//                  elements, and blockDim.y threads share each output's reduced elements.
//
// Few outputs with many elements each would leave most of the GPU idle at one block per group of
// outputs, so then the reduced elements are split over blockIdx.y as well: each split leaves its
// accumulator in a workspace and a second row_kernel pass combines the splits. A thread's
// elements and the order of every combine follow from the block shape and the splits alone, never
// from the grid along x (outputs are walked with a grid stride) or from timing, so a result
// repeats bit for bit on one device; the splits follow the device's SM count.
//
// An Op describes a reduction: acc_t (trivially copyable: row_allreduce moves it between lanes as
// 32-bit words), identity(), load(value, j) (j: the element's row-major index within the reduced
// dims, for argmax) and combine(a, b), associative and commutative, so any tree of combines gives
// the same answer up to rounding. A Finish writes one output element from its accumulator.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/cuda_check.h"
#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::cuda::red {

// ---- geometry ----

// Enough for any tensor kiln makes in practice once size-1 dims are dropped and neighbours that
// are contiguous with each other merged; make_plan throws beyond it.
constexpr int kMaxDims = 10;

// Sizes and strides of a list of dims, indexed row-major.
struct DimList {
  int n = 0;
  int64_t size[kMaxDims];
  int64_t stride[kMaxDims];
};

// The element offset of row-major index i within the dims of d.
__device__ __forceinline__ int64_t offset_of(const DimList& d, int64_t i) {
  if (d.n == 0) return 0;
  if (d.n == 1) return i * d.stride[0];
  int64_t off = 0;
  for (int k = d.n - 1; k > 0; --k) {
    const int64_t q = i / d.size[k];
    off += (i - q * d.size[k]) * d.stride[k];
    i = q;
  }
  return off + i * d.stride[0];
}

// The input seen as [outputs (kept dims, row-major as the output is laid out), R (reduced dims,
// row-major in their logical order, which is the order of reduced_last_2d's columns)].
struct Plan {
  DimList kept, reduced;
  int64_t outputs = 1, count = 1;
};

inline void push_dim(DimList& list, int64_t size, int64_t stride, const char* op) {
  if (list.n > 0 && list.stride[list.n - 1] == size * stride) {
    list.size[list.n - 1] *= size;
    list.stride[list.n - 1] = stride;
    return;
  }
  if (list.n == kMaxDims)
    throw NotImplementedError(std::string(op) + ": more than " + std::to_string(kMaxDims) +
                              " non-mergeable dims on the GPU; make the input contiguous first");
  list.size[list.n] = size;
  list.stride[list.n] = stride;
  ++list.n;
}

inline Plan make_plan(const Tensor& x, const std::vector<bool>& reduced, const char* op) {
  Plan p;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t size = x.shape()[d];
    if (reduced[d])
      p.count *= size;
    else
      p.outputs *= size;
    if (size == 1) continue;
    push_dim(reduced[d] ? p.reduced : p.kept, size, x.strides()[d], op);
  }
  return p;
}

// Multiprocessors of `device` (the tensor's, not whichever is current), asked of the driver once
// per device.
inline int sm_count(int device) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable) {
    const int known = cached[device].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  int count = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  // Threads that race here store the same value.
  if (cacheable) cached[device].store(count, std::memory_order_relaxed);
  return count;
}

// ---- sources: where the row kernel's elements come from ----

// The elements of a strided input, loaded through the op.
template <class T, class Op>
struct StridedSource {
  const T* x;
  DimList kept, reduced;
  __device__ int64_t base(int64_t o) const { return offset_of(kept, o); }
  __device__ typename Op::acc_t at(const Op& op, int64_t base, int64_t j) const {
    return op.load(x[base + offset_of(reduced, j)], j);
  }
};

// Accumulators a first pass left as a contiguous [outputs, splits] matrix.
template <class Op>
struct PartialSource {
  const typename Op::acc_t* p;
  int64_t splits;
  __device__ int64_t base(int64_t o) const { return o * splits; }
  __device__ typename Op::acc_t at(const Op&, int64_t base, int64_t j) const { return p[base + j]; }
};

// ---- kernels ----

// blockDim.x threads per output row, blockDim.y rows per block; blockIdx.y takes the columns
// [blockIdx.y * chunk, +chunk) of each row. With `partial` set, each (row, split) leaves its
// accumulator at partial[row * gridDim.y + split] instead of finishing.
template <class Op, class Src, class Finish>
__global__ void row_kernel(Src src, int64_t outputs, int64_t count, int64_t chunk, Op op,
                           Finish finish, typename Op::acc_t* partial) {
  using Acc = typename Op::acc_t;
  __shared__ RowReduceSmem<Acc> smem;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t end = begin + chunk < count ? begin + chunk : count;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  // The loop bound is the same for the whole block, so every thread reaches row_allreduce.
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.y; first < outputs;
       first += step) {
    const int64_t o = first + threadIdx.y;
    Acc acc = op.identity();
    if (o < outputs) {
      const int64_t base = src.base(o);
      for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x)
        acc = op.combine(acc, src.at(op, base, j));
    }
    acc = row_allreduce(
        acc, [&op](const Acc& a, const Acc& b) { return op.combine(a, b); }, op.identity(), smem);
    if (threadIdx.x == 0 && o < outputs) {
      if (partial)
        partial[o * gridDim.y + blockIdx.y] = acc;
      else
        finish(o, acc);
    }
  }
}

// For a contiguous innermost kept dim: 32 neighbouring outputs per block along x (coalesced
// reads), blockDim.y threads walking the reduced elements, combined through shared memory in a
// fixed order. blockIdx.y splits the reduced elements as in row_kernel. Launched with
// kColumnBlock threads, which __launch_bounds__ tells ptxas: held to 1024 threads, six sm_75
// instantiations took 66 registers, more than a block of 1024 may have (check-kernel-resources).
constexpr unsigned kColumnBlockX = 32, kColumnBlockY = 8;
constexpr unsigned kColumnBlock = kColumnBlockX * kColumnBlockY;
template <class Op, class T, class Finish>
__global__ void __launch_bounds__(kColumnBlock)
    column_kernel(StridedSource<T, Op> src, int64_t outputs, int64_t count, int64_t chunk, Op op,
                  Finish finish, typename Op::acc_t* partial) {
  using Acc = typename Op::acc_t;
  KILN_DYNAMIC_SHARED(Acc, smem);
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t end = begin + chunk < count ? begin + chunk : count;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x; first < outputs;
       first += step) {
    const int64_t o = first + threadIdx.x;
    Acc acc = op.identity();
    if (o < outputs) {
      const int64_t base = src.base(o);
      for (int64_t j = begin + threadIdx.y; j < end; j += blockDim.y)
        acc = op.combine(acc, src.at(op, base, j));
    }
    smem[threadIdx.y * blockDim.x + threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < outputs) {
      for (unsigned r = 1; r < blockDim.y; ++r)
        acc = op.combine(acc, smem[r * blockDim.x + threadIdx.x]);
      if (partial)
        partial[o * gridDim.y + blockIdx.y] = acc;
      else
        finish(o, acc);
    }
    __syncthreads();
  }
}

// ---- launching ----

// How many blocks keep the device busy, and the most a row is split into.
constexpr int64_t kBlocksPerSm = 4;
constexpr int64_t kMaxSplits = 1024;

// Splits of the reduced elements: enough blocks to fill the device when there are few outputs,
// at least min_chunk elements per split.
inline int64_t choose_splits(int64_t blocks_x, int64_t count, int64_t min_chunk, int device) {
  const int64_t target = kBlocksPerSm * sm_count(device);
  if (blocks_x >= target / 2 || count < 2 * min_chunk) return 1;
  int64_t splits = std::min(ceil_div(target, blocks_x), count / min_chunk);
  return std::max<int64_t>(1, std::min(splits, kMaxSplits));
}

// Reduces x over the dims marked in `reduced`: finish(o, acc) is called once per output o (the
// row-major index over the kept dims). Outputs with no reduced elements get op.identity().
template <class Op, class T, class Finish>
void reduce(const T* x, const Plan& plan, const Op& op, const Finish& finish, Device device) {
  using Acc = typename Op::acc_t;
  const int64_t outputs = plan.outputs, count = plan.count;
  if (outputs == 0) return;
  StridedSource<T, Op> src{x, plan.kept, plan.reduced};
  const bool reduced_inner_contiguous =
      plan.reduced.n == 0 || plan.reduced.stride[plan.reduced.n - 1] == 1;
  const bool kept_inner_contiguous = plan.kept.n > 0 && plan.kept.stride[plan.kept.n - 1] == 1;
  const bool column = !reduced_inner_contiguous && kept_inner_contiguous;

  int64_t splits = 1, chunk = count;
  Tensor workspace;
  Acc* partial = nullptr;
  auto make_partials = [&](int64_t blocks_x, int64_t min_chunk) {
    splits = choose_splits(blocks_x, count, min_chunk, device.index);
    chunk = ceil_div(std::max<int64_t>(count, 1), splits);
    splits = ceil_div(std::max<int64_t>(count, 1), chunk);  // no empty trailing split
    if (splits > 1) {
      workspace = empty({outputs * splits * static_cast<int64_t>(sizeof(Acc))}, DType::u8, device);
      partial = static_cast<Acc*>(workspace.data_ptr());
    }
  };

  if (column) {
    const dim3 block(kColumnBlockX, kColumnBlockY);
    const int64_t blocks_x = grid_for(outputs, kColumnBlockX);
    make_partials(blocks_x, kColumnBlockY * 16);
    const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
    KILN_LAUNCH(grid, block, block.x * block.y * sizeof(Acc), stream(), column_kernel)
    (src, outputs, count, chunk, op, finish, partial);
    KILN_CUDA_CHECK_LAUNCH();
  } else {
    const int tx = row_threads(count);
    const int ty = std::max(1, kThreads / tx);
    const int64_t blocks_x = grid_for(outputs, ty);
    make_partials(blocks_x, static_cast<int64_t>(tx) * 16);
    const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
    KILN_LAUNCH(grid, dim3(tx, ty), 0, stream(), row_kernel)
    (src, outputs, count, chunk, op, finish, partial);
    KILN_CUDA_CHECK_LAUNCH();
  }
  if (splits == 1) return;
  // Second pass over the [outputs, splits] accumulators: a plain row reduction.
  const int tx = row_threads(splits);
  const int ty = std::max(1, kThreads / tx);
  const int64_t blocks_x = grid_for(outputs, ty);
  KILN_LAUNCH(dim3(static_cast<unsigned>(blocks_x), 1), dim3(tx, ty), 0, stream(), row_kernel)
  (PartialSource<Op>{partial, splits}, outputs, splits, splits, op, finish,
   static_cast<Acc*>(nullptr));
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda::red
