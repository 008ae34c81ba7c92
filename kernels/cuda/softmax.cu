// softmax and log_softmax over one dim of a contiguous tensor, forward and backward, in the
// accumulation type (f32 for the 16-bit floats): the max, then the sum of exp(x - max), then the
// outputs, as on the CPU (kernels/cpu/softmax.cpp). The tensor is seen as [outer, size, inner]:
//
//   inner == 1 (the dim is innermost): each row is contiguous, so threads share a row and read it
//     coalesced: a warp a row for rows up to kWarpRowMax (8 rows a block), a block of
//     kLongRowThreads for longer ones, the max and sums combined with row_allreduce
//     (block_reduce.cuh), which gives every thread of the row the same bits.
//   inner > 1: a thread per (outer, inner) column walks the dim alone: neighbouring threads take
//     neighbouring columns, so each step of the walk reads a contiguous run, and no combine is
//     needed at all.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/lab_routes.h"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/softmax.h"

namespace kiln::cuda {

namespace {

// Rows of a contiguous [rows, size] matrix: blockDim.x threads per row, blockDim.y rows per block.
// The loop bound is uniform over the block, so every thread reaches the combines. Max keeps the
// CPU's std::max(max, v): a NaN never becomes the max (it poisons the sum instead).
template <class D, class Acc, bool Log>
__global__ void softmax_rows_kernel(const D* x, D* out, int64_t rows, int64_t size) {
  __shared__ RowReduceSmem<Acc> smem;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.y; first < rows;
       first += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = first + threadIdx.y;
    const bool valid = row < rows;
    const D* in = x + (valid ? row : 0) * size;
    D* o = out + (valid ? row : 0) * size;
    const Acc lowest = -static_cast<Acc>(INFINITY);
    Acc max = lowest;
    if (valid)
      for (int64_t k = threadIdx.x; k < size; k += blockDim.x)
        max = Max{}(max, device_convert<Acc>(in[k]));
    max = row_allreduce(max, Max{}, lowest, smem);
    Acc sum = 0;
    if (valid)
      for (int64_t k = threadIdx.x; k < size; k += blockDim.x)
        sum += exp_acc(device_convert<Acc>(in[k]) - max);
    sum = row_allreduce(sum, Sum{}, Acc(0), smem);
    if (!valid) continue;
    if (Log) {
      const Acc shift = max + log_acc(sum);
      for (int64_t k = threadIdx.x; k < size; k += blockDim.x)
        o[k] = device_convert<D>(device_convert<Acc>(in[k]) - shift);
    } else {
      const Acc scale = Acc(1) / sum;
      for (int64_t k = threadIdx.x; k < size; k += blockDim.x)
        o[k] = device_convert<D>(exp_acc(device_convert<Acc>(in[k]) - max) * scale);
    }
  }
}

// inner > 1: one thread per (outer, inner) column, walking the dim with stride inner; neighbouring
// threads read neighbouring columns, so each step is coalesced. kThreads a block: in f64 it takes
// 72 registers a thread on sm_90, too many for a block of 1024.
template <class D, class Acc, bool Log>
__global__ void __launch_bounds__(kThreads)
    softmax_columns_kernel(const D* x, D* out, int64_t columns, int64_t size, int64_t inner) {
  for (int64_t c = global_thread_index(); c < columns; c += grid_stride()) {
    const int64_t r = c / inner, i = c - r * inner;
    const D* in = x + r * size * inner + i;
    D* o = out + r * size * inner + i;
    Acc max = -static_cast<Acc>(INFINITY);
    for (int64_t k = 0; k < size; ++k) max = Max{}(max, device_convert<Acc>(in[k * inner]));
    Acc sum = 0;
    for (int64_t k = 0; k < size; ++k) sum += exp_acc(device_convert<Acc>(in[k * inner]) - max);
    if (Log) {
      const Acc shift = max + log_acc(sum);
      for (int64_t k = 0; k < size; ++k)
        o[k * inner] = device_convert<D>(device_convert<Acc>(in[k * inner]) - shift);
    } else {
      const Acc scale = Acc(1) / sum;
      for (int64_t k = 0; k < size; ++k)
        o[k * inner] = device_convert<D>(exp_acc(device_convert<Acc>(in[k * inner]) - max) * scale);
    }
  }
}

// The backward term of one element: log: g - exp(y) s with s = sum g; softmax: y (g - s) with
// s = sum g y.
template <class Acc, bool Log>
__device__ __forceinline__ Acc backward_term(Acc y, Acc g) {
  return Log ? g : g * y;
}
template <class Acc, bool Log>
__device__ __forceinline__ Acc backward_out(Acc y, Acc g, Acc s) {
  return Log ? g - exp_acc(y) * s : y * (g - s);
}

template <class D, class Acc, bool Log>
__global__ void softmax_backward_rows_kernel(const D* y, const D* g, D* out, int64_t rows,
                                             int64_t size) {
  __shared__ RowReduceSmem<Acc> smem;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.y; first < rows;
       first += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = first + threadIdx.y;
    const bool valid = row < rows;
    const int64_t base = (valid ? row : 0) * size;
    Acc s = 0;
    if (valid)
      for (int64_t k = threadIdx.x; k < size; k += blockDim.x)
        s += backward_term<Acc, Log>(device_convert<Acc>(y[base + k]),
                                     device_convert<Acc>(g[base + k]));
    s = row_allreduce(s, Sum{}, Acc(0), smem);
    if (!valid) continue;
    for (int64_t k = threadIdx.x; k < size; k += blockDim.x)
      out[base + k] = device_convert<D>(backward_out<Acc, Log>(
          device_convert<Acc>(y[base + k]), device_convert<Acc>(g[base + k]), s));
  }
}

template <class D, class Acc, bool Log>
__global__ void softmax_backward_columns_kernel(const D* y, const D* g, D* out, int64_t columns,
                                                int64_t size, int64_t inner) {
  for (int64_t c = global_thread_index(); c < columns; c += grid_stride()) {
    const int64_t r = c / inner, i = c - r * inner;
    const int64_t base = r * size * inner + i;
    Acc s = 0;
    for (int64_t k = 0; k < size; ++k)
      s += backward_term<Acc, Log>(device_convert<Acc>(y[base + k * inner]),
                                   device_convert<Acc>(g[base + k * inner]));
    for (int64_t k = 0; k < size; ++k) {
      const int64_t at = base + k * inner;
      out[at] = device_convert<D>(
          backward_out<Acc, Log>(device_convert<Acc>(y[at]), device_convert<Acc>(g[at]), s));
    }
  }
}

struct Layout {
  int64_t outer = 1, size = 1, inner = 1;
};

Layout layout_of(const Tensor& x, int64_t dim) {
  Layout l;
  l.size = x.dim() == 0 ? 1 : x.shape()[dim];
  for (int64_t d = 0; d < dim; ++d) l.outer *= x.shape()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) l.inner *= x.shape()[d];
  return l;
}

void check_contiguous(const Tensor& t, const Tensor& like, const char* what) {
  if (!t.is_contiguous() || t.shape() != like.shape() || t.dtype() != like.dtype())
    throw ShapeError(std::string("softmax: the GPU kernel needs ") + what +
                     " contiguous and of the input's shape and dtype");
}

// Calls f(TypeTag<T>) for the floating dtypes.
template <class F>
void visit_floating(DType dtype, F&& f) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<acc_type_t<T>>) {
      f(tag);
    } else {
      throw DTypeError(std::string("softmax: expected a floating-point tensor, got ") +
                       dtype_name(dtype));
    }
  });
}

// Rows up to this long get a warp each; longer ones a block of kLongRowThreads.
constexpr int64_t kWarpRowMax = 1024;
constexpr int kLongRowThreads = 512;

dim3 row_block(int64_t size) {
  return size <= kWarpRowMax ? dim3(32, 8) : dim3(kLongRowThreads, 1);
}

}  // namespace

void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) {
  if (x.numel() == 0) return;
  check_contiguous(x, x, "the input");
  check_contiguous(out, x, "the output");
  const Layout l = layout_of(x, dim);
  // A shape the lab's table routes runs that version instead (lab_routes.h; none by default).
  if (!log && l.inner == 1 && x.dtype() == DType::f32) {
    if (const lab::SoftmaxVersion* version = routed_softmax(l.outer, l.size)) {
      version->run({x.data<float>(), out.data<float>(), l.outer, l.size});
      return;
    }
  }
  visit_floating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using D = device_t<T>;
    using Acc = acc_type_t<T>;
    const D* in = static_cast<const D*>(x.data_ptr());
    D* o = static_cast<D*>(out.data_ptr());
    if (l.inner == 1) {
      const dim3 block = row_block(l.size);
      const unsigned grid = grid_for(l.outer, block.y);
      if (log) KILN_LAUNCH(grid, block, 0, stream(), softmax_rows_kernel<D, Acc, true>)
      (in, o, l.outer, l.size);
      else KILN_LAUNCH(grid, block, 0, stream(), softmax_rows_kernel<D, Acc, false>)(in, o, l.outer,
                                                                                     l.size);
    } else {
      const int64_t columns = l.outer * l.inner;
      const unsigned grid = grid_for(columns);
      if (log) KILN_LAUNCH(grid, kThreads, 0, stream(), softmax_columns_kernel<D, Acc, true>)
      (in, o, columns, l.size, l.inner);
      else KILN_LAUNCH(grid, kThreads, 0, stream(), softmax_columns_kernel<D, Acc, false>)(
          in, o, columns, l.size, l.inner);
    }
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void softmax_backward(const Tensor& y, const Tensor& g, int64_t dim, bool log,
                      const Tensor& grad_x) {
  if (y.numel() == 0) return;
  check_contiguous(y, y, "the output");
  check_contiguous(g, y, "the gradient");
  check_contiguous(grad_x, y, "the input gradient");
  const Layout l = layout_of(y, dim);
  visit_floating(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using D = device_t<T>;
    using Acc = acc_type_t<T>;
    const D* yp = static_cast<const D*>(y.data_ptr());
    const D* gp = static_cast<const D*>(g.data_ptr());
    D* o = static_cast<D*>(grad_x.data_ptr());
    if (l.inner == 1) {
      const dim3 block = row_block(l.size);
      const unsigned grid = grid_for(l.outer, block.y);
      if (log) KILN_LAUNCH(grid, block, 0, stream(), softmax_backward_rows_kernel<D, Acc, true>)
      (yp, gp, o, l.outer, l.size);
      else KILN_LAUNCH(grid, block, 0, stream(), softmax_backward_rows_kernel<D, Acc, false>)(
          yp, gp, o, l.outer, l.size);
    } else {
      const int64_t columns = l.outer * l.inner;
      const unsigned grid = grid_for(columns);
      if (log)
        KILN_LAUNCH(grid, kThreads, 0, stream(), softmax_backward_columns_kernel<D, Acc, true>)
      (yp, gp, o, columns, l.size, l.inner);
      else KILN_LAUNCH(grid, kThreads, 0, stream(), softmax_backward_columns_kernel<D, Acc, false>)(
          yp, gp, o, columns, l.size, l.inner);
    }
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr SoftmaxKernels kCuda{.softmax = cuda::softmax,
                               .softmax_backward = cuda::softmax_backward};
}  // namespace

const SoftmaxKernels* const SoftmaxKernels::cuda = &kCuda;

}  // namespace kiln
