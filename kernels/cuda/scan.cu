// cumsum (and cumprod, by a thread per line) along one dim of a strided tensor, forward or
// reversed, accumulating in double (floats) or i64 (integers) as the CPU does
// (kernels/cpu/scan.cpp). The tensor is a set of lines along the dim, one per position of the other
// dims (merged where contiguous, as the reduction engine merges them), and a line is scanned by one
// warp or one thread:
//
//   cumsum_warp_kernel: lines contiguous in x and longer than a warp: a warp per line (8 a block),
//     32 elements a step, so each step is one coalesced read; a shuffle scan within the step plus
//     the carry of the steps before.
//   scan_thread_kernel: anything else, a thread per line walking it in order (grid-stride,
//     kThreads a block): with the dim strided, neighbouring lines are what lie next to each other
//     in memory, so neighbouring threads take neighbouring lines.
//
// Neither splits a line across warps, so a line is summed in one order on every run; the warp
// scan adds in a tree within each step, so its float sums may round differently from the CPU's
// left-to-right ones.
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/cuda/reduction.cuh"
#include "kiln/kernels/scan.h"

namespace kiln::cuda {

namespace {

// The lines along the scanned dim: the other dims, with x's and out's strides.
struct Lines {
  int n = 0;
  int64_t size[red::kMaxDims];
  int64_t x_stride[red::kMaxDims];
  int64_t out_stride[red::kMaxDims];
};

struct LineOffsets {
  int64_t x, out;
};

__device__ __forceinline__ LineOffsets line_offsets(const Lines& l, int64_t i) {
  LineOffsets o{0, 0};
  for (int k = l.n - 1; k >= 0; --k) {
    const int64_t q = i / l.size[k], r = i - q * l.size[k];
    o.x += r * l.x_stride[k];
    o.out += r * l.out_stride[k];
    i = q;
  }
  return o;
}

// A warp per line, 32 elements per step: an inclusive warp scan plus the carry of the steps
// before. For lines that are contiguous in x. blockDim is (32, warps per block).
template <class D, class Acc, class O>
__global__ void cumsum_warp_kernel(const D* x, O* out, Lines lines, int64_t count, int64_t n,
                                   int64_t x_step, int64_t out_step, bool reverse) {
  const int lane = threadIdx.x;
  // Uniform per warp: a warp either has a line or skips the loop body entirely.
  for (int64_t line = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; line < count;
       line += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const LineOffsets base = line_offsets(lines, line);
    Acc carry = 0;
    for (int64_t first = 0; first < n; first += 32) {
      const int64_t i = first + lane;
      const int64_t j = reverse ? n - 1 - i : i;
      Acc v = i < n ? device_convert<Acc>(x[base.x + j * x_step]) : Acc(0);
      for (int offset = 1; offset < 32; offset <<= 1) {
        const Acc up = shfl_up(v, offset);
        if (lane >= offset) v += up;
      }
      v += carry;
      if (i < n) out[base.out + j * out_step] = device_convert<O>(v);
      carry = shfl(v, kWarpSize - 1);
    }
  }
}

// A thread per line, walking it in order: for lines strided in x, where neighbouring lines are
// what lies next to each other in memory. kProduct: the running product (cumprod), which has no
// warp form.
template <class D, class Acc, class O, bool kProduct = false>
__global__ void scan_thread_kernel(const D* x, O* out, Lines lines, int64_t count, int64_t n,
                                   int64_t x_step, int64_t out_step, bool reverse) {
  for (int64_t line = global_thread_index(); line < count; line += grid_stride()) {
    const LineOffsets base = line_offsets(lines, line);
    Acc acc = kProduct ? Acc(1) : Acc(0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = reverse ? n - 1 - i : i;
      if constexpr (kProduct)
        acc *= device_convert<Acc>(x[base.x + j * x_step]);
      else
        acc += device_convert<Acc>(x[base.x + j * x_step]);
      out[base.out + j * out_step] = device_convert<O>(acc);
    }
  }
}

// cumprod's gradient (kernels/scan.h), a thread per line of contiguous x, g and out: the products
// before each element into `before` (a double per element), then r from the end of the line.
template <class D>
__global__ void cumprod_backward_kernel(const D* x, const D* g, D* out, double* before, Lines lines,
                                        int64_t count, int64_t n, int64_t step) {
  for (int64_t line = global_thread_index(); line < count; line += grid_stride()) {
    const int64_t base = line_offsets(lines, line).x;
    double* mine = before + line * n;
    double product = 1;
    for (int64_t i = 0; i < n; ++i) {
      mine[i] = product;
      product *= device_convert<double>(x[base + i * step]);
    }
    double r = 0;
    for (int64_t i = n - 1; i >= 0; --i) {
      const double next = i + 1 < n ? device_convert<double>(x[base + (i + 1) * step]) : 0.0;
      r = device_convert<double>(g[base + i * step]) + next * r;
      out[base + i * step] = device_convert<D>(mine[i] * r);
    }
  }
}

// The lines along dim: x's other dims, merged where both x's and out's strides allow.
Lines lines_along(const char* op, const Tensor& x, const Tensor& out, int64_t dim, int64_t& count) {
  Lines lines;
  count = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == dim || x.shape()[d] == 1) continue;
    count *= x.shape()[d];
    const int64_t size = x.shape()[d], xs = x.strides()[d], os = out.strides()[d];
    if (lines.n > 0 && lines.x_stride[lines.n - 1] == size * xs &&
        lines.out_stride[lines.n - 1] == size * os) {
      lines.size[lines.n - 1] *= size;
      lines.x_stride[lines.n - 1] = xs;
      lines.out_stride[lines.n - 1] = os;
      continue;
    }
    if (lines.n == red::kMaxDims)
      throw NotImplementedError(std::string(op) +
                                ": too many non-mergeable dims for the GPU kernel; make the "
                                "input contiguous first");
    lines.size[lines.n] = size;
    lines.x_stride[lines.n] = xs;
    lines.out_stride[lines.n] = os;
    ++lines.n;
  }
  return lines;
}

}  // namespace

void cumsum(const Tensor& x, int64_t dim, bool reverse, const Tensor& out) {
  if (x.numel() == 0) return;
  if (out.shape() != x.shape())
    throw ShapeError("cumsum: the GPU kernel needs an output of the input's shape");
  const int64_t n = x.shape()[dim];
  const int64_t x_step = x.strides()[dim], out_step = out.strides()[dim];
  int64_t count = 0;
  const Lines lines = lines_along("cumsum", x, out, dim, count);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using D = device_t<T>;
    using Acc = std::conditional_t<std::is_floating_point_v<acc_type_t<T>>, double, int64_t>;
    const D* in = static_cast<const D*>(x.data_ptr());
    auto run = [&](auto* o) {
      using O = std::remove_pointer_t<decltype(o)>;
      if (x_step == 1 && n > 32) {
        const dim3 block(32, 8);
        const unsigned grid = grid_for(count, block.y);
        KILN_LAUNCH(grid, block, 0, stream(), cumsum_warp_kernel<D, Acc, O>)
        (in, o, lines, count, n, x_step, out_step, reverse);
      } else {
        KILN_LAUNCH(grid_for(count), kThreads, 0, stream(), scan_thread_kernel<D, Acc, O>)
        (in, o, lines, count, n, x_step, out_step, reverse);
      }
      KILN_CUDA_CHECK_LAUNCH();
    };
    if (out.dtype() == x.dtype()) {
      run(static_cast<D*>(out.data_ptr()));
    } else if (out.dtype() == DType::i64 && !is_floating(x.dtype())) {
      run(static_cast<int64_t*>(out.data_ptr()));
    } else {
      throw DTypeError(std::string("cumsum: the GPU kernel writes ") + dtype_name(x.dtype()) +
                       " (or i64 for integers), not " + dtype_name(out.dtype()));
    }
  });
}

void cumprod(const Tensor& x, int64_t dim, const Tensor& out) {
  if (x.numel() == 0) return;
  const int64_t n = x.shape()[dim];
  int64_t count = 0;
  const Lines lines = lines_along("cumprod", x, out, dim, count);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using D = device_t<T>;
    using Acc = std::conditional_t<std::is_floating_point_v<acc_type_t<T>>, double, int64_t>;
    auto run = [&](auto* o) {
      using O = std::remove_pointer_t<decltype(o)>;
      KILN_LAUNCH(grid_for(count), kThreads, 0, stream(), scan_thread_kernel<D, Acc, O, true>)
      (static_cast<const D*>(x.data_ptr()), o, lines, count, n, x.strides()[dim],
       out.strides()[dim], false);
      KILN_CUDA_CHECK_LAUNCH();
    };
    if (out.dtype() == x.dtype())
      run(static_cast<D*>(out.data_ptr()));
    else if (out.dtype() == DType::i64 && !is_floating(x.dtype()))
      run(static_cast<int64_t*>(out.data_ptr()));
    else
      throw DTypeError(std::string("cumprod: the GPU kernel writes ") + dtype_name(x.dtype()) +
                       " (or i64 for integers), not " + dtype_name(out.dtype()));
  });
}

void cumprod_backward(const Tensor& x, const Tensor& g, int64_t dim, const Tensor& out) {
  if (x.numel() == 0) return;
  if (!x.is_contiguous() || !g.is_contiguous() || !out.is_contiguous())
    throw ValueError("cumprod_backward: the GPU kernel takes contiguous x, gradient and output");
  const int64_t n = x.shape()[dim];
  int64_t count = 0;
  const Lines lines = lines_along("cumprod_backward", x, out, dim, count);
  const Tensor before = empty({count * n}, DType::f64, x.device());
  visit_floating_device("cumprod_backward", x.dtype(), [&](auto tag) {
    using D = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(count), kThreads, 0, stream(), cumprod_backward_kernel<D>)
    (static_cast<const D*>(x.data_ptr()), static_cast<const D*>(g.data_ptr()),
     static_cast<D*>(out.data_ptr()), before.data<double>(), lines, count, n, x.strides()[dim]);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr ScanKernels kCuda{
    .cumsum = cuda::cumsum, .cumprod = cuda::cumprod, .cumprod_backward = cuda::cumprod_backward};
}  // namespace

const ScanKernels* const ScanKernels::cuda = &kCuda;

}  // namespace kiln
