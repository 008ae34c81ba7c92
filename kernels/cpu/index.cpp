#include "kiln/kernels/index.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kiln/kernels/copy.h"
#include "kiln/kernels/cpu/loops.h"
#include "kiln/kernels/layout.h"

namespace kiln::cpu {

namespace {

// dst += value in the accumulation type; bool adds as logical or, as PyTorch.
template <class T>
inline void add_into(T& dst, T value) {
  if constexpr (std::is_same_v<T, bool>) {
    dst = dst || value;
  } else {
    using A = acc_type_t<T>;
    dst = convert<T>(static_cast<A>(static_cast<A>(dst) + static_cast<A>(value)));
  }
}

// Calls fn(offsets) once per line along `dim` of `shape`, with each operand's offset of the line's
// first element. Lines never share an output element in gather and scatter_add (they differ in a
// coordinate other than dim), so running them on different threads is race-free.
template <size_t N, class F>
void for_each_line(const Shape& shape, int64_t dim, const std::array<Shape, N>& strides, F&& fn) {
  Shape outer = shape;
  outer.erase(outer.begin() + dim);
  std::array<Shape, N> outer_strides = strides;
  for (Shape& s : outer_strides) s.erase(s.begin() + dim);
  for_each_offset<N>(outer, outer_strides, fn);
}

}  // namespace

void cat(const std::vector<Tensor>& inputs, int64_t dim, const Tensor& out) {
  int64_t start = 0;
  for (const Tensor& input : inputs) {
    const int64_t length = input.size(dim);
    if (input.numel() > 0) CopyKernels::cpu.copy(input, narrowed_view(out, dim, start, length));
    start += length;
  }
}

void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  if (out.numel() == 0) return;
  const Folded in = fold_at(x.shape(), dim);
  const int64_t count = index.numel();
  const int64_t* idx = index.data<int64_t>();
  // Pure data movement: whole inner rows are copied as bytes, so every dtype takes the same path.
  const size_t row_bytes = static_cast<size_t>(in.inner) * x.element_size();
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for(in.outer * count, in.inner, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t o = row / count, i = row % count;
      std::memcpy(dst + row * row_bytes, src + (o * in.size + idx[i]) * row_bytes, row_bytes);
    }
  });
}

void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.data_ptr());
    const int64_t* idx = index.data<int64_t>();
    T* o = out.data<T>();
    const int64_t length = index.size(dim);
    const int64_t xs = x.stride(dim), is = index.stride(dim), os = out.stride(dim);
    for_each_line<3>(index.shape(), dim, {out.strides(), index.strides(), x.strides()},
                     [&](const std::array<int64_t, 3>& k) {
                       for (int64_t j = 0; j < length; ++j)
                         o[k[0] + j * os] = in[k[2] + idx[k[1] + j * is] * xs];
                     });
  });
}

void scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const int64_t* idx = index.data<int64_t>();
    const T* s = static_cast<const T*>(src.data_ptr());
    const int64_t length = index.size(dim);
    const int64_t os = out.stride(dim), is = index.stride(dim), ss = src.stride(dim);
    for_each_line<3>(index.shape(), dim, {out.strides(), index.strides(), src.strides()},
                     [&](const std::array<int64_t, 3>& k) {
                       for (int64_t j = 0; j < length; ++j)
                         add_into(o[k[0] + idx[k[1] + j * is] * os], s[k[2] + j * ss]);
                     });
  });
}

void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const T* s = src.data<T>();
    const int64_t* idx = index.data<int64_t>();
    const Folded f = fold_at(out.shape(), dim);
    const int64_t count = index.numel();
    // Repeated indices add into the same row, so the loop over i stays serial; threads split the
    // outer blocks, or the columns of the inner rows when there is a single block (dim 0).
    auto add_block = [&](int64_t outer, int64_t col_begin, int64_t col_end) {
      for (int64_t i = 0; i < count; ++i) {
        T* dst = o + (outer * f.size + idx[i]) * f.inner;
        const T* from = s + (outer * count + i) * f.inner;
        for (int64_t c = col_begin; c < col_end; ++c) add_into(dst[c], from[c]);
      }
    };
    if (f.outer > 1) {
      parallel_for(f.outer, count * f.inner, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) add_block(b, 0, f.inner);
      });
    } else {
      parallel_for(f.inner, count, [&](int64_t begin, int64_t end) { add_block(0, begin, end); });
    }
  });
}

void one_hot(const Tensor& labels, const Tensor& out) {
  const int64_t* l = labels.data<int64_t>();
  int64_t* o = out.data<int64_t>();
  const int64_t classes = out.size(-1);
  parallel_for(labels.numel(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i * classes + l[i]] = 1;
  });
}

int64_t first_out_of_range(const Tensor& index, int64_t size) {
  const int64_t* values = index.data<int64_t>();
  for (int64_t i = 0; i < index.numel(); ++i)
    if (values[i] < 0 || values[i] >= size) return i;
  return -1;
}

}  // namespace kiln::cpu

namespace kiln {

const IndexKernels IndexKernels::cpu{.cat = cpu::cat,
                                     .index_select = cpu::index_select,
                                     .gather = cpu::gather,
                                     .scatter_add_ = cpu::scatter_add_,
                                     .index_add_ = cpu::index_add_,
                                     .one_hot = cpu::one_hot,
                                     .first_out_of_range = cpu::first_out_of_range};

}  // namespace kiln
