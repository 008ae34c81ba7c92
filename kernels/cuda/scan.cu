// cumsum along one dim of a strided tensor, forward or reversed, accumulating in double (floats)
// or i64 (integers) as the CPU does (kernels/cpu/scan.cpp). The tensor is a set of lines along the
// dim, one per position of the other dims (merged where contiguous, as the reduction engine
// merges them), and a line is scanned by one warp or one thread:
//
//   cumsum_warp_kernel: lines contiguous in x and longer than a warp: a warp per line (8 a block),
//     32 elements a step, so each step is one coalesced read; a shuffle scan within the step plus
//     the carry of the steps before.
//   cumsum_thread_kernel: anything else, a thread per line walking it in order (grid-stride,
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
// what lies next to each other in memory.
template <class D, class Acc, class O>
__global__ void cumsum_thread_kernel(const D* x, O* out, Lines lines, int64_t count, int64_t n,
                                     int64_t x_step, int64_t out_step, bool reverse) {
  for (int64_t line = global_thread_index(); line < count; line += grid_stride()) {
    const LineOffsets base = line_offsets(lines, line);
    Acc acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = reverse ? n - 1 - i : i;
      acc += device_convert<Acc>(x[base.x + j * x_step]);
      out[base.out + j * out_step] = device_convert<O>(acc);
    }
  }
}

}  // namespace

void cumsum(const Tensor& x, int64_t dim, bool reverse, const Tensor& out) {
  if (x.numel() == 0) return;
  if (out.shape() != x.shape())
    throw ShapeError("cumsum: the GPU kernel needs an output of the input's shape");
  const int64_t n = x.shape()[dim];
  const int64_t x_step = x.strides()[dim], out_step = out.strides()[dim];
  Lines lines;
  int64_t count = 1;
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
      throw NotImplementedError(
          "cumsum: too many non-mergeable dims for the GPU kernel; make the "
          "input contiguous first");
    lines.size[lines.n] = size;
    lines.x_stride[lines.n] = xs;
    lines.out_stride[lines.n] = os;
    ++lines.n;
  }
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
        KILN_LAUNCH(grid_for(count), kThreads, 0, stream(), cumsum_thread_kernel<D, Acc, O>)
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

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr ScanKernels kCuda{.cumsum = cuda::cumsum};
}  // namespace

const ScanKernels* const ScanKernels::cuda = &kCuda;

}  // namespace kiln
