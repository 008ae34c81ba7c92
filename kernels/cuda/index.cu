// The index family on the GPU: cat, index_select, gather, scatter_add_, index_add_, one_hot and
// the bounds check of an index tensor. Each kernel runs one thread per element of the side it
// walks (grid-stride, kThreads a block), so neighbouring threads touch neighbouring elements of
// that side:
//
//   cat, index_select, gather: a thread per output element, reading wherever the index points.
//     Pure data movement, so elements move as unsigned words of their size.
//   scatter_add_, index_add_: a thread per source element, adding into the destination with an
//     atomic add, as sources may collide. Where they do, the order of their additions, and so the
//     rounding of a floating sum, can change from run to run. A u8 destination, which has no
//     atomic add, is added into as an i32 copy.
//   one_hot: a thread per label. first_out_of_range: a thread per index, an atomicMin keeping the
//     smallest bad position, so the answer is the CPU's whatever the order.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/index.h"
#include "kiln/kernels/layout.h"

namespace kiln::cuda {

namespace {

constexpr int kMaxDims = 12;

// Pure data movement copies elements as unsigned words of their size, so every dtype takes one
// of four paths.
template <class F>
void visit_element_size(const char* op, size_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      return f(TypeTag<uint8_t>{});
    case 2:
      return f(TypeTag<uint16_t>{});
    case 4:
      return f(TypeTag<uint32_t>{});
    case 8:
      return f(TypeTag<uint64_t>{});
    default:
      throw DTypeError(std::string(op) + ": unsupported element size " + std::to_string(bytes));
  }
}

// Three operands walked over one shape: element i's offset in each, from its coordinates.
struct Walk3 {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[3][kMaxDims] = {};
};

Walk3 make_walk(const char* op, const Shape& shape, const std::array<Shape, 3>& strides) {
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw NotImplementedError(std::string(op) + ": CUDA kernels take at most " +
                              std::to_string(kMaxDims) + " dims, got " +
                              std::to_string(shape.size()));
  Walk3 w;
  w.ndim = static_cast<int>(shape.size());
  for (int d = 0; d < w.ndim; ++d) {
    w.sizes[d] = shape[d];
    for (int k = 0; k < 3; ++k) w.strides[k][d] = strides[k][d];
  }
  return w;
}

struct Offsets3 {
  int64_t o[3];
};

__device__ inline Offsets3 walk_offsets(const Walk3& w, int64_t i) {
  Offsets3 r = {{0, 0, 0}};
  for (int d = w.ndim - 1; d >= 0; --d) {
    const int64_t coord = i % w.sizes[d];
    i /= w.sizes[d];
    r.o[0] += coord * w.strides[0][d];
    r.o[1] += coord * w.strides[1][d];
    r.o[2] += coord * w.strides[2][d];
  }
  return r;
}

// dst += value, rounded as the CPU's add_into: the 16-bit floats add in float and round once;
// bool adds as logical or. u8 has none: its adds go through i32 (add_through_i32).
__device__ inline void atomic_add(float* p, float v) {
  atomicAdd(p, v);
}
__device__ inline void atomic_add(double* p, double v) {
  atomicAdd(p, v);
}
__device__ inline void atomic_add(int32_t* p, int32_t v) {
  atomicAdd(reinterpret_cast<int*>(p), static_cast<int>(v));
}
__device__ inline void atomic_add(int64_t* p, int64_t v) {
  // Two's complement addition is the same bit operation signed or unsigned.
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}
__device__ inline void atomic_add(bool* p, bool v) {
  // Every writer stores the same true, so a plain byte store is race-free.
  if (v) *p = true;
}
template <class H>
__device__ inline void atomic_add_16(H* p, H v) {
  unsigned short* word = reinterpret_cast<unsigned short*>(p);
  unsigned short old = *word, assumed;
  do {
    assumed = old;
    const H sum(static_cast<float>(H::from_bits(assumed)) + static_cast<float>(v));
    old = atomicCAS(word, assumed, static_cast<unsigned short>(sum.bits));
  } while (old != assumed);
}
__device__ inline void atomic_add(Half* p, Half v) {
  atomic_add_16(p, v);
}
__device__ inline void atomic_add(BFloat16* p, BFloat16 v) {
  atomic_add_16(p, v);
}

template <class E>
__global__ void cat_kernel(const E* __restrict__ src, E* __restrict__ dst, int64_t total,
                           int64_t chunk, int64_t row, int64_t start) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const int64_t o = i / chunk;
    dst[o * row + start + (i - o * chunk)] = src[i];
  }
}

template <class E>
__global__ void index_select_kernel(const E* __restrict__ x, const int64_t* __restrict__ index,
                                    E* __restrict__ out, int64_t total, int64_t count,
                                    int64_t inner, int64_t size) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const int64_t r = i % inner, t = i / inner;
    const int64_t j = t % count, o = t / count;
    out[i] = x[(o * size + index[j]) * inner + r];
  }
}

// Operands: 0 out, 1 index, 2 x (whose stride along dim is 0 in the walk and x_dim_stride here).
template <class E>
__global__ void gather_kernel(const E* __restrict__ x, const int64_t* __restrict__ index,
                              E* __restrict__ out, int64_t total, Walk3 w, int64_t x_dim_stride) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const Offsets3 k = walk_offsets(w, i);
    out[k.o[0]] = x[k.o[2] + index[k.o[1]] * x_dim_stride];
  }
}

// Operands: 0 out (whose stride along dim is 0 in the walk and out_dim_stride here), 1 index,
// 2 src.
template <class T>
__global__ void scatter_add_kernel(T* out, const int64_t* __restrict__ index,
                                   const T* __restrict__ src, int64_t total, Walk3 w,
                                   int64_t out_dim_stride) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const Offsets3 k = walk_offsets(w, i);
    atomic_add(out + k.o[0] + index[k.o[1]] * out_dim_stride, src[k.o[2]]);
  }
}

template <class T>
__global__ void index_add_kernel(T* out, const int64_t* __restrict__ index,
                                 const T* __restrict__ src, int64_t total, int64_t count,
                                 int64_t inner, int64_t size) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const int64_t r = i % inner, t = i / inner;
    const int64_t j = t % count, o = t / count;
    atomic_add(out + (o * size + index[j]) * inner + r, src[i]);
  }
}

__global__ void one_hot_kernel(const int64_t* __restrict__ labels, int64_t* __restrict__ out,
                               int64_t total, int64_t classes) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    out[i * classes + labels[i]] = 1;
  }
}

__global__ void first_out_of_range_kernel(const int64_t* __restrict__ index, int64_t total,
                                          int64_t size, unsigned long long* first) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const int64_t v = index[i];
    if (v < 0 || v >= size) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

// u8 has no atomic add, and a CAS on the aligned 32-bit word that holds a byte would read and
// write up to three bytes past the tensor's end, which compute-sanitizer reports as out of bounds
// when each tensor is its own cudaMalloc (KILN_CUDA_CACHING_ALLOCATOR=0). So the adds go into i32
// copies of out and src: the low byte of the i32 sum is the u8 sum wrapped, as on the CPU, and
// the copy back to u8 keeps just that byte.
// visit_dtype over the dtypes that have an atomic_add: all but u8, which add_through_i32 takes.
template <class F>
void visit_atomic_dtype(const char* op, DType dtype, F&& f) {
  if (dtype == DType::u8)
    throw Error(std::string(op) + ": internal error: u8 adds must go through add_through_i32");
  visit_dtype(dtype, [&](auto tag) {
    if constexpr (!std::is_same_v<typename decltype(tag)::type, uint8_t>) f(tag);
  });
}

template <class Add>
void add_through_i32(const Tensor& out, const Tensor& src, Add add) {
  Tensor wide_out = contiguous_with(*CopyKernels::cuda, out, DType::i32);
  add(wide_out, contiguous_with(*CopyKernels::cuda, src, DType::i32));
  CopyKernels::cuda->copy(wide_out, out);
}

}  // namespace

void cat(const std::vector<Tensor>& inputs, int64_t dim, const Tensor& out) {
  const Folded f = fold_at(out.shape(), dim);
  int64_t start = 0;
  for (const Tensor& input : inputs) {
    const int64_t length = input.size(dim);
    if (input.numel() > 0) {
      // The copy kernel moves raw elements, so other dtypes and layouts are converted first.
      Tensor part = contiguous_with(*CopyKernels::cuda, input, out.dtype());
      const int64_t total = part.numel();
      visit_element_size("cat", out.element_size(), [&](auto tag) {
        using E = typename decltype(tag)::type;
        KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), cat_kernel<E>)
        (static_cast<const E*>(part.data_ptr()), static_cast<E*>(out.data_ptr()), total,
         length * f.inner, f.size * f.inner, start * f.inner);
        KILN_CUDA_CHECK_LAUNCH();
      });
    }
    start += length;
  }
}

void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const int64_t total = out.numel();
  if (total == 0) return;
  const Folded f = fold_at(x.shape(), dim);
  visit_element_size("index_select", x.element_size(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), index_select_kernel<E>)
    (static_cast<const E*>(x.data_ptr()), index.data<int64_t>(), static_cast<E*>(out.data_ptr()),
     total, index.numel(), f.inner, f.size);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const int64_t total = out.numel();
  if (total == 0) return;
  Shape x_strides = x.strides();
  x_strides[dim] = 0;
  const Walk3 w = make_walk("gather", index.shape(), {out.strides(), index.strides(), x_strides});
  visit_element_size("gather", x.element_size(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), gather_kernel<E>)
    (static_cast<const E*>(x.data_ptr()), index.data<int64_t>(), static_cast<E*>(out.data_ptr()),
     total, w, x.stride(dim));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t total = index.numel();
  if (total == 0) return;
  if (out.dtype() == DType::u8)
    return add_through_i32(out, src, [&](const Tensor& wide_out, const Tensor& wide_src) {
      scatter_add_(wide_out, dim, index, wide_src);
    });
  Shape out_strides = out.strides();
  out_strides[dim] = 0;
  const Walk3 w =
      make_walk("scatter_add", index.shape(), {out_strides, index.strides(), src.strides()});
  visit_atomic_dtype("scatter_add_", out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), scatter_add_kernel<T>)
    (out.data<T>(), index.data<int64_t>(), static_cast<const T*>(src.data_ptr()), total, w,
     out.stride(dim));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t total = src.numel();
  if (total == 0) return;
  if (out.dtype() == DType::u8)
    return add_through_i32(out, src, [&](const Tensor& wide_out, const Tensor& wide_src) {
      index_add_(wide_out, dim, index, wide_src);
    });
  const Folded f = fold_at(out.shape(), dim);
  visit_atomic_dtype("index_add_", out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), index_add_kernel<T>)
    (out.data<T>(), index.data<int64_t>(), src.data<T>(), total, index.numel(), f.inner, f.size);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void one_hot(const Tensor& labels, const Tensor& out) {
  const int64_t total = labels.numel();
  if (total == 0 || out.numel() == 0) return;
  KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), one_hot_kernel)
  (labels.data<int64_t>(), out.data<int64_t>(), total, out.size(-1));
  KILN_CUDA_CHECK_LAUNCH();
}

int64_t first_out_of_range(const Tensor& index, int64_t size) {
  const int64_t total = index.numel();
  if (total == 0) return -1;
  Tensor first = empty({1}, DType::i64, index.device());
  // All ones: no position yet, and -1 when read back as i64.
  KILN_CUDA_CHECK(cudaMemsetAsync(first.data_ptr(), 0xff, sizeof(int64_t), stream()));
  KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), first_out_of_range_kernel)
  (index.data<int64_t>(), total, size, static_cast<unsigned long long*>(first.data_ptr()));
  KILN_CUDA_CHECK_LAUNCH();
  // On the index's device's current stream, which the kernel went on (the device switch made that
  // device current, ops/dispatch.h), and waited for: the read follows the kernel.
  int64_t position = -1;
  copy_bytes(&position, Device::cpu(), first.data_ptr(), index.device(), sizeof position);
  return position;
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr IndexKernels kCuda{.cat = cuda::cat,
                             .index_select = cuda::index_select,
                             .gather = cuda::gather,
                             .scatter_add_ = cuda::scatter_add_,
                             .index_add_ = cuda::index_add_,
                             .one_hot = cuda::one_hot,
                             .first_out_of_range = cuda::first_out_of_range};
}  // namespace

const IndexKernels* const IndexKernels::cuda = &kCuda;

}  // namespace kiln
