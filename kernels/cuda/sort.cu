// The order of each row of a contiguous [rows, n] tensor (kernels/sort.h), by rank: an element's
// place in the sorted row is the number of elements that sort before it, counting an equal element
// as before it when it lies earlier in the row, which makes the order stable. A block per row;
// each thread ranks up to one element per pass against the whole row, read a tile at a time
// through shared memory so every element is read from global memory once per pass and block.
//
// n^2 comparisons a row: fast for the rows this serves (logits of thousands of classes, top-k,
// attention rows), hopeless for one row of millions, which sort_rows refuses with a hint.
#include <cstdint>
#include <string>

#include "kiln/core/cuda_check.h"
#include "kiln/core/error.h"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/sort.h"

namespace kiln::cuda {

namespace {

constexpr int kTile = 512;
// 2^18 elements: 2^36 comparisons for the row, seconds on a GPU; past it sort on the CPU.
constexpr int64_t kMaxRowLength = int64_t{1} << 18;

// a before b in ascending order: NaN above every number.
template <class A>
__device__ __forceinline__ bool ascending_less(A a, A b) {
  if (is_nan(a)) return false;
  if (is_nan(b)) return true;
  return a < b;
}

template <class D>
__global__ void sort_rows_kernel(const D* x, int64_t* indices, int64_t rows, int64_t n,
                                 bool descending) {
  using A = device_acc_t<D>;
  __shared__ A tile[kTile];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const D* in = x + row * n;
    int64_t* out = indices + row * n;
    // Every thread runs every pass and tile (the barriers need the whole block); a thread whose i
    // is past the row only helps load.
    for (int64_t first = 0; first < n; first += blockDim.x) {
      const int64_t i = first + threadIdx.x;
      const A mine = i < n ? device_convert<A>(in[i]) : A{};
      int64_t rank = 0;
      for (int64_t base = 0; base < n; base += kTile) {
        const int64_t count = n - base < kTile ? n - base : kTile;
        __syncthreads();
        for (int64_t k = threadIdx.x; k < count; k += blockDim.x)
          tile[k] = device_convert<A>(in[base + k]);
        __syncthreads();
        if (i >= n) continue;
        for (int64_t k = 0; k < count; ++k) {
          const A other = tile[k];
          const bool other_first =
              descending ? ascending_less(mine, other) : ascending_less(other, mine);
          const bool tied = !ascending_less(mine, other) && !ascending_less(other, mine);
          rank += other_first || (tied && base + k < i);
        }
      }
      if (i < n) out[rank] = i;
    }
  }
}

}  // namespace

void sort_rows(const Tensor& x, bool descending, const Tensor& indices) {
  const int64_t rows = x.size(0), n = x.size(1);
  if (rows == 0 || n == 0) return;
  if (n > kMaxRowLength)
    throw NotImplementedError("sort: the GPU kernel ranks rows of at most " +
                              std::to_string(kMaxRowLength) + " elements (n^2 comparisons), got " +
                              std::to_string(n) + "; sort such a row on the CPU (x.cpu())");
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using D = device_t<T>;
    const int threads = n < kThreads ? static_cast<int>((n + 31) / 32 * 32) : kThreads;
    KILN_LAUNCH(grid_for(rows, 1), threads, 0, stream(), sort_rows_kernel<D>)
    (static_cast<const D*>(x.data_ptr()), indices.data<int64_t>(), rows, n, descending);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr SortKernels kCuda{.sort_rows = cuda::sort_rows};
}  // namespace

const SortKernels* const SortKernels::cuda = &kCuda;

}  // namespace kiln
