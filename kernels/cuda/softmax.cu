#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/kernels/cuda/reduce_util.cuh"
#include "kiln/kernels/softmax.h"
#include "kiln/kernels/cuda/launch.h"

namespace kiln::cuda {

namespace {

template <class Acc>
struct MaxOp {
  using acc_t = Acc;
  // As the CPU's std::max(max, v): a NaN never becomes the max (it poisons the sum instead).
  __device__ Acc identity() const { return -static_cast<Acc>(INFINITY); }
  __device__ Acc combine(Acc a, Acc b) const { return a < b ? b : a; }
  __device__ Acc shfl_down(Acc a, int offset) const { return red::shfl_down(a, offset); }
};

template <class Acc>
struct AddOp {
  using acc_t = Acc;
  __device__ Acc identity() const { return Acc(0); }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __device__ Acc shfl_down(Acc a, int offset) const { return red::shfl_down(a, offset); }
};

// The row_combine result in every thread of the row. Every thread of the block must call it.
template <class Op>
__device__ typename Op::acc_t row_all(typename Op::acc_t v, const Op& op, typename Op::acc_t* smem,
                                      typename Op::acc_t* bcast) {
  v = red::row_combine(v, op, smem);
  if (blockDim.x <= 32) return __shfl_sync(0xffffffffu, v, 0);
  if (threadIdx.x == 0) bcast[threadIdx.y] = v;
  __syncthreads();
  v = bcast[threadIdx.y];
  __syncthreads();
  return v;
}

// Rows of a contiguous [rows, size] matrix: blockDim.x threads per row, blockDim.y rows per block.
// The loop bound is uniform over the block, so every thread reaches the combines.
template <class D, class Acc, bool Log>
__global__ void softmax_rows_kernel(const D* x, D* out, int64_t rows, int64_t size) {
  __shared__ Acc smem[32], bcast[32];
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.y; first < rows;
       first += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = first + threadIdx.y;
    const bool valid = row < rows;
    const D* in = x + (valid ? row : 0) * size;
    D* o = out + (valid ? row : 0) * size;
    Acc max = -static_cast<Acc>(INFINITY);
    if (valid)
      for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
        const Acc v = red::cvt<Acc>(in[k]);
        max = max < v ? v : max;
      }
    max = row_all(max, MaxOp<Acc>{}, smem, bcast);
    Acc sum = 0;
    if (valid)
      for (int64_t k = threadIdx.x; k < size; k += blockDim.x)
        sum += red::exp_acc(red::cvt<Acc>(in[k]) - max);
    sum = row_all(sum, AddOp<Acc>{}, smem, bcast);
    if (!valid) continue;
    if (Log) {
      const Acc shift = max + red::log_acc(sum);
      for (int64_t k = threadIdx.x; k < size; k += blockDim.x)
        o[k] = red::cvt<D>(red::cvt<Acc>(in[k]) - shift);
    } else {
      const Acc scale = Acc(1) / sum;
      for (int64_t k = threadIdx.x; k < size; k += blockDim.x)
        o[k] = red::cvt<D>(red::exp_acc(red::cvt<Acc>(in[k]) - max) * scale);
    }
  }
}

// inner > 1: one thread per (outer, inner) column, walking the dim with stride inner; neighbouring
// threads read neighbouring columns, so each step is coalesced.
template <class D, class Acc, bool Log>
__global__ void softmax_columns_kernel(const D* x, D* out, int64_t columns, int64_t size,
                                       int64_t inner) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < columns;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = c / inner, i = c - r * inner;
    const D* in = x + r * size * inner + i;
    D* o = out + r * size * inner + i;
    Acc max = -static_cast<Acc>(INFINITY);
    for (int64_t k = 0; k < size; ++k) {
      const Acc v = red::cvt<Acc>(in[k * inner]);
      max = max < v ? v : max;
    }
    Acc sum = 0;
    for (int64_t k = 0; k < size; ++k) sum += red::exp_acc(red::cvt<Acc>(in[k * inner]) - max);
    if (Log) {
      const Acc shift = max + red::log_acc(sum);
      for (int64_t k = 0; k < size; ++k)
        o[k * inner] = red::cvt<D>(red::cvt<Acc>(in[k * inner]) - shift);
    } else {
      const Acc scale = Acc(1) / sum;
      for (int64_t k = 0; k < size; ++k)
        o[k * inner] = red::cvt<D>(red::exp_acc(red::cvt<Acc>(in[k * inner]) - max) * scale);
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
  return Log ? g - red::exp_acc(y) * s : y * (g - s);
}

template <class D, class Acc, bool Log>
__global__ void softmax_backward_rows_kernel(const D* y, const D* g, D* out, int64_t rows,
                                             int64_t size) {
  __shared__ Acc smem[32], bcast[32];
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.y; first < rows;
       first += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = first + threadIdx.y;
    const bool valid = row < rows;
    const int64_t base = (valid ? row : 0) * size;
    Acc s = 0;
    if (valid)
      for (int64_t k = threadIdx.x; k < size; k += blockDim.x)
        s += backward_term<Acc, Log>(red::cvt<Acc>(y[base + k]), red::cvt<Acc>(g[base + k]));
    s = row_all(s, AddOp<Acc>{}, smem, bcast);
    if (!valid) continue;
    for (int64_t k = threadIdx.x; k < size; k += blockDim.x)
      out[base + k] = red::cvt<D>(
          backward_out<Acc, Log>(red::cvt<Acc>(y[base + k]), red::cvt<Acc>(g[base + k]), s));
  }
}

template <class D, class Acc, bool Log>
__global__ void softmax_backward_columns_kernel(const D* y, const D* g, D* out, int64_t columns,
                                                int64_t size, int64_t inner) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < columns;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = c / inner, i = c - r * inner;
    const int64_t base = r * size * inner + i;
    Acc s = 0;
    for (int64_t k = 0; k < size; ++k)
      s += backward_term<Acc, Log>(red::cvt<Acc>(y[base + k * inner]),
                                   red::cvt<Acc>(g[base + k * inner]));
    for (int64_t k = 0; k < size; ++k) {
      const int64_t at = base + k * inner;
      out[at] = red::cvt<D>(backward_out<Acc, Log>(red::cvt<Acc>(y[at]), red::cvt<Acc>(g[at]), s));
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

constexpr int64_t kMaxBlocks = int64_t(1) << 20;

// Rows up to this long get a warp each; longer ones a block of kLongRowThreads.
constexpr int64_t kWarpRowMax = 1024;
constexpr int kLongRowThreads = 512;

dim3 row_block(int64_t size) {
  return size <= kWarpRowMax ? dim3(32, 8) : dim3(kLongRowThreads, 1);
}

unsigned blocks_for(int64_t items, int64_t per_block) {
  return static_cast<unsigned>(std::min(red::ceil_div(items, per_block), kMaxBlocks));
}

}  // namespace

void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) {
  if (x.numel() == 0) return;
  check_contiguous(x, x, "the input");
  check_contiguous(out, x, "the output");
  const Layout l = layout_of(x, dim);
  visit_floating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using D = red::device_t<T>;
    using Acc = acc_type_t<T>;
    const D* in = static_cast<const D*>(x.data_ptr());
    D* o = static_cast<D*>(out.data_ptr());
    if (l.inner == 1) {
      const dim3 block = row_block(l.size);
      const unsigned grid = blocks_for(l.outer, block.y);
      if (log)
        softmax_rows_kernel<D, Acc, true><<<grid, block, 0, stream()>>>(in, o, l.outer, l.size);
      else
        softmax_rows_kernel<D, Acc, false><<<grid, block, 0, stream()>>>(in, o, l.outer, l.size);
    } else {
      const int64_t columns = l.outer * l.inner;
      const unsigned grid = blocks_for(columns, 256);
      if (log)
        softmax_columns_kernel<D, Acc, true>
            <<<grid, 256, 0, stream()>>>(in, o, columns, l.size, l.inner);
      else
        softmax_columns_kernel<D, Acc, false>
            <<<grid, 256, 0, stream()>>>(in, o, columns, l.size, l.inner);
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
    using D = red::device_t<T>;
    using Acc = acc_type_t<T>;
    const D* yp = static_cast<const D*>(y.data_ptr());
    const D* gp = static_cast<const D*>(g.data_ptr());
    D* o = static_cast<D*>(grad_x.data_ptr());
    if (l.inner == 1) {
      const dim3 block = row_block(l.size);
      const unsigned grid = blocks_for(l.outer, block.y);
      if (log)
        softmax_backward_rows_kernel<D, Acc, true>
            <<<grid, block, 0, stream()>>>(yp, gp, o, l.outer, l.size);
      else
        softmax_backward_rows_kernel<D, Acc, false>
            <<<grid, block, 0, stream()>>>(yp, gp, o, l.outer, l.size);
    } else {
      const int64_t columns = l.outer * l.inner;
      const unsigned grid = blocks_for(columns, 256);
      if (log)
        softmax_backward_columns_kernel<D, Acc, true>
            <<<grid, 256, 0, stream()>>>(yp, gp, o, columns, l.size, l.inner);
      else
        softmax_backward_columns_kernel<D, Acc, false>
            <<<grid, 256, 0, stream()>>>(yp, gp, o, columns, l.size, l.inner);
    }
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr SoftmaxKernels kCuda{
    .softmax = cuda::softmax,
    .softmax_backward = cuda::softmax_backward};
}  // namespace

const SoftmaxKernels* const SoftmaxKernels::cuda = &kCuda;

}  // namespace kiln
