#include "kiln/kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

namespace {

// Columns of the [size, inner] slab handled together when inner > 1: enough to stream whole
// cache lines along inner, few enough that the per-column max and sum stay in L1.
constexpr int64_t kColumnBlock = 256;

// One softmax over a contiguous row of `size` elements.
template <class T, class Acc>
void softmax_row(const T* in, T* out, int64_t size, bool log) {
  Acc max = -std::numeric_limits<Acc>::infinity();
  for (int64_t k = 0; k < size; ++k) max = std::max(max, convert<Acc>(in[k]));
  Acc sum = 0;
  for (int64_t k = 0; k < size; ++k) sum += std::exp(convert<Acc>(in[k]) - max);
  if (log) {
    const Acc shift = max + std::log(sum);
    for (int64_t k = 0; k < size; ++k) out[k] = convert<T>(convert<Acc>(in[k]) - shift);
  } else {
    const Acc scale = Acc(1) / sum;
    for (int64_t k = 0; k < size; ++k)
      out[k] = convert<T>(std::exp(convert<Acc>(in[k]) - max) * scale);
  }
}

// `width` neighbouring columns of a [size, inner] slab at once, so every pass reads contiguous
// runs of inner instead of striding through memory one column at a time.
template <class T, class Acc>
void softmax_columns(const T* in, T* out, int64_t size, int64_t inner, int64_t width, bool log) {
  std::vector<Acc> max(width, -std::numeric_limits<Acc>::infinity()), sum(width, Acc(0));
  for (int64_t k = 0; k < size; ++k)
    for (int64_t i = 0; i < width; ++i) max[i] = std::max(max[i], convert<Acc>(in[k * inner + i]));
  for (int64_t k = 0; k < size; ++k)
    for (int64_t i = 0; i < width; ++i)
      sum[i] += std::exp(convert<Acc>(in[k * inner + i]) - max[i]);
  if (log) {
    for (int64_t i = 0; i < width; ++i) max[i] += std::log(sum[i]);
    for (int64_t k = 0; k < size; ++k)
      for (int64_t i = 0; i < width; ++i)
        out[k * inner + i] = convert<T>(convert<Acc>(in[k * inner + i]) - max[i]);
  } else {
    for (int64_t i = 0; i < width; ++i) sum[i] = Acc(1) / sum[i];
    for (int64_t k = 0; k < size; ++k)
      for (int64_t i = 0; i < width; ++i)
        out[k * inner + i] =
            convert<T>(std::exp(convert<Acc>(in[k * inner + i]) - max[i]) * sum[i]);
  }
}

}  // namespace

void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) {
  if (x.numel() == 0) return;
  int64_t outer = 1, inner = 1;
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[dim];
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];

  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_type_t<T>;
    if constexpr (std::is_floating_point_v<Acc>) {
      const T* in = static_cast<const T*>(x.data_ptr());
      T* o = static_cast<T*>(out.data_ptr());
      if (inner == 1) {
        parallel_for(outer, size * 4, [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r)
            softmax_row<T, Acc>(in + r * size, o + r * size, size, log);
        });
        return;
      }
      const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
      parallel_for(outer * blocks, size * std::min(inner, kColumnBlock) * 4,
                   [&](int64_t begin, int64_t end) {
                     for (int64_t task = begin; task < end; ++task) {
                       const int64_t r = task / blocks, first = (task % blocks) * kColumnBlock;
                       const int64_t width = std::min(kColumnBlock, inner - first);
                       const int64_t base = r * size * inner + first;
                       softmax_columns<T, Acc>(in + base, o + base, size, inner, width, log);
                     }
                   });
    } else {
      throw DTypeError(
          fmt::format("softmax: expected a floating-point tensor, got {}", dtype_name(x.dtype())));
    }
  });
}

// One pass over each line of [outer, size, inner] for its sum, one for the gradient; the sum
// accumulates in double, as the CPU's sum kernel does.
void softmax_backward(const Tensor& y, const Tensor& g, int64_t dim, bool log,
                      const Tensor& grad_x) {
  if (y.numel() == 0) return;
  int64_t outer = 1, inner = 1;
  const int64_t size = y.dim() == 0 ? 1 : y.shape()[dim];
  for (int64_t d = 0; d < dim; ++d) outer *= y.shape()[d];
  for (int64_t d = dim + 1; d < y.dim(); ++d) inner *= y.shape()[d];
  visit_dtype(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<acc_type_t<T>>) {
      const T* py = static_cast<const T*>(y.data_ptr());
      const T* pg = static_cast<const T*>(g.data_ptr());
      T* out = static_cast<T*>(grad_x.data_ptr());
      parallel_for(outer * inner, size * 4, [&](int64_t begin, int64_t end) {
        for (int64_t line = begin; line < end; ++line) {
          const int64_t base = (line / inner) * size * inner + line % inner;
          double s = 0;
          for (int64_t k = 0; k < size; ++k) {
            const int64_t i = base + k * inner;
            s += log ? convert<double>(pg[i]) : convert<double>(pg[i]) * convert<double>(py[i]);
          }
          for (int64_t k = 0; k < size; ++k) {
            const int64_t i = base + k * inner;
            const double yi = convert<double>(py[i]), gi = convert<double>(pg[i]);
            out[i] = convert<T>(log ? gi - std::exp(yi) * s : yi * (gi - s));
          }
        }
      });
    } else {
      throw DTypeError(fmt::format("softmax_backward: expected a floating-point tensor, got {}",
                                   dtype_name(y.dtype())));
    }
  });
}

}  // namespace kiln::cpu

namespace kiln {

const SoftmaxKernels SoftmaxKernels::cpu{.softmax = cpu::softmax,
                                         .softmax_backward = cpu::softmax_backward};

}  // namespace kiln
