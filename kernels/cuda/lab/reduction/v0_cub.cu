// Reduction v0: the library. CUB (shipped with the CUDA toolkit) sums a vector with
// cub::DeviceReduce::Sum and the rows of a matrix with cub::DeviceSegmentedReduce::Sum, its
// segments the rows. Every other version is checked against it and timed against it.
//
// CUB's first call asks how much temporary storage it needs; the storage lives after the lab's
// own workspace (reduction_workspace_bytes), so the timed call allocates nothing.
//
// measured: not yet on a GPU.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/lab/reduction/tiling.h"
#include "kiln/kernels/cuda/lab/reduction/versions.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::lab::reduction {

namespace {

// Row r's segment starts at r * cols: the offsets as an iterator, so no offsets array is built.
struct RowStart {
  int64_t cols;
  __host__ __device__ int64_t operator()(int64_t row) const { return row * cols; }
};

using RowOffsets = thrust::transform_iterator<RowStart, thrust::counting_iterator<int64_t>>;

RowOffsets row_offsets(int64_t cols, int64_t first_row) {
  return RowOffsets(thrust::counting_iterator<int64_t>(first_row), RowStart{cols});
}

// CUB's temporary storage for the problem; with `storage` null only the size is returned.
size_t cub_call(const ReductionArgs& args, void* storage, size_t bytes) {
  if (args.rows == 1) {
    KILN_CUDA_CHECK(
        cub::DeviceReduce::Sum(storage, bytes, args.x, args.out, args.cols, cuda::stream()));
  } else {
    KILN_CUDA_CHECK(cub::DeviceSegmentedReduce::Sum(storage, bytes, args.x, args.out, args.rows,
                                                    row_offsets(args.cols, 0),
                                                    row_offsets(args.cols, 1), cuda::stream()));
  }
  return bytes;
}

size_t cub_storage_bytes(int64_t rows, int64_t cols) {
  ReductionArgs shape;
  shape.rows = rows;
  shape.cols = cols;
  return cub_call(shape, nullptr, 0);
}

}  // namespace

void v0_cub(const ReductionArgs& args) {
  const size_t offset = workspace_layout(args.rows, args.cols).bytes;
  const size_t bytes = cub_storage_bytes(args.rows, args.cols);
  cub_call(args, static_cast<char*>(args.workspace) + offset, bytes);
}

}  // namespace kiln::lab::reduction

namespace kiln::lab {

size_t reduction_workspace_bytes(int64_t rows, int64_t cols) {
  return reduction::workspace_layout(rows, cols).bytes +
         reduction::align_bytes(std::max<size_t>(1, reduction::cub_storage_bytes(rows, cols)));
}

}  // namespace kiln::lab
