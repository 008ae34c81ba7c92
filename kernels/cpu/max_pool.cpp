#include "kiln/kernels/cpu/max_pool.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "kiln/core/cpu_isa.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/half.h"
#include "kiln/kernels/cpu/convert/convert.h"
#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

namespace {

// How the loops see an element: f32 and f64 as they are, bf16 as its bits, widened to f32 by a
// shift and narrowed back by one (exact: the maximum is one of the inputs, NaN payloads too).
template <class S>
struct Value {
  using F = S;
  [[gnu::always_inline]] static F get(S v) { return v; }
  [[gnu::always_inline]] static S put(F v) { return v; }
};
template <>
struct Value<uint16_t> {
  using F = float;
  [[gnu::always_inline]] static float get(uint16_t bits) {
    return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
  }
  [[gnu::always_inline]] static uint16_t put(float v) {
    return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
  }
};

// The input rows [h0, h1) of an output row's windows, clipped to the input.
struct RowWindow {
  int64_t h0, h1;
};

// One output cell by the window's scan, row by row, left to right: the first maximum wins, a NaN
// wins over every number (the last NaN over an earlier one), as PyTorch. A window that holds no
// input element keeps -inf and points at its first position; the backward skips indices outside
// the plane.
template <class S>
[[gnu::always_inline]] inline void cell(const S* src, S* out, int64_t* indices,
                                        const Pool2dGeometry& g, RowWindow rows, int64_t ow) {
  using F = typename Value<S>::F;
  int64_t w0 = ow * g.stride_w - g.pad_w;
  const int64_t w1 = std::min(w0 + (g.kernel_w - 1) * g.dilation_w + 1, g.in_w);
  while (w0 < 0) w0 += g.dilation_w;
  int64_t best_index = rows.h0 * g.in_w + w0;
  F best = -std::numeric_limits<F>::infinity();
  for (int64_t ih = rows.h0; ih < rows.h1; ih += g.dilation_h) {
    for (int64_t iw = w0; iw < w1; iw += g.dilation_w) {
      const F v = Value<S>::get(src[ih * g.in_w + iw]);
      if (v > best || std::isnan(v)) {
        best = v;
        best_index = ih * g.in_w + iw;
      }
    }
  }
  out[ow] = Value<S>::put(best);
  indices[ow] = best_index;
}

// The cells [ow0, ow1) of a row whose windows lie inside the input's columns, the same scan tap
// by tap across a block of cells at once, so that the compiler vectorises across the cells (SW:
// the column stride, known at compile time for the loads to vectorise). Indices fit an int32 (the
// caller checks the plane).
template <class S, int SW>
[[gnu::always_inline]] inline void inner_cells(const S* src, S* out, int64_t* indices,
                                               const Pool2dGeometry& g, RowWindow rows, int64_t ow0,
                                               int64_t ow1) {
  using F = typename Value<S>::F;
  constexpr int64_t kBlock = 64;
  F best[kBlock];
  int32_t at[kBlock];
  for (int64_t c = ow0; c < ow1; c += kBlock) {
    const int64_t n = std::min(kBlock, ow1 - c);
    const int64_t first = rows.h0 * g.in_w + c * SW - g.pad_w;
    for (int64_t j = 0; j < n; ++j) {
      best[j] = -std::numeric_limits<F>::infinity();
      at[j] = static_cast<int32_t>(first + j * SW);
    }
    for (int64_t ih = rows.h0; ih < rows.h1; ih += g.dilation_h) {
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const int32_t offset =
            static_cast<int32_t>(ih * g.in_w + c * SW - g.pad_w + kw * g.dilation_w);
        const S* tap = src + offset;
        for (int64_t j = 0; j < n; ++j) {
          const F v = Value<S>::get(tap[j * SW]);
          const bool take = v > best[j] || v != v;
          best[j] = take ? v : best[j];
          at[j] = take ? offset + static_cast<int32_t>(j * SW) : at[j];
        }
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      out[c + j] = Value<S>::put(best[j]);
      indices[c + j] = at[j];
    }
  }
}

// The output columns whose windows lie inside the input: [begin, end).
struct InnerColumns {
  int64_t begin, end;
};

InnerColumns inner_columns(const Pool2dGeometry& g) {
  const int64_t begin = std::min((g.pad_w + g.stride_w - 1) / g.stride_w, g.out_w);
  // The last window start w0 = ow * stride_w - pad_w with w0 + (kernel_w - 1) * dilation_w < in_w.
  const int64_t last_start = g.in_w - 1 - (g.kernel_w - 1) * g.dilation_w + g.pad_w;
  const int64_t end = last_start < 0 ? 0 : std::min(g.out_w, last_start / g.stride_w + 1);
  return {begin, std::max(begin, end)};
}

template <class S>
[[gnu::always_inline]] inline void pool_planes(const S* in, S* out, int64_t* indices,
                                               const Pool2dGeometry& g, int64_t begin,
                                               int64_t end) {
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  const InnerColumns inner = inner_columns(g);
  const bool blocks =
      in_plane <= std::numeric_limits<int32_t>::max() && (g.stride_w == 1 || g.stride_w == 2);
  for (int64_t p = begin; p < end; ++p) {
    const S* src = in + p * in_plane;
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      RowWindow rows{oh * g.stride_h - g.pad_h, 0};
      rows.h1 = std::min(rows.h0 + (g.kernel_h - 1) * g.dilation_h + 1, g.in_h);
      while (rows.h0 < 0) rows.h0 += g.dilation_h;
      S* o = out + p * out_plane + oh * g.out_w;
      int64_t* ix = indices + p * out_plane + oh * g.out_w;
      const int64_t first_edge_end = blocks ? inner.begin : g.out_w;
      for (int64_t ow = 0; ow < first_edge_end; ++ow) cell(src, o, ix, g, rows, ow);
      if (!blocks) continue;
      if (g.stride_w == 2)
        inner_cells<S, 2>(src, o, ix, g, rows, inner.begin, inner.end);
      else
        inner_cells<S, 1>(src, o, ix, g, rows, inner.begin, inner.end);
      for (int64_t ow = inner.end; ow < g.out_w; ++ow) cell(src, o, ix, g, rows, ow);
    }
  }
}

template <class S>
using PlanesFn = void (*)(const S*, S*, int64_t*, const Pool2dGeometry&, int64_t, int64_t);

template <class S>
void planes_baseline(const S* in, S* out, int64_t* indices, const Pool2dGeometry& g, int64_t begin,
                     int64_t end) {
  pool_planes(in, out, indices, g, begin, end);
}

// The AVX2 build serves AVX-512 too: its 16-lane copy ran slower on a Zen 5 (12.8 ms against
// 8.6 for ResNet-50's stem pool, one thread), the block's 55 cells leaving a long remainder.
#if defined(__x86_64__)
template <class S>
__attribute__((target("avx2,fma,f16c"))) void planes_avx2(const S* in, S* out, int64_t* indices,
                                                          const Pool2dGeometry& g, int64_t begin,
                                                          int64_t end) {
  pool_planes(in, out, indices, g, begin, end);
}
#endif

template <class S>
PlanesFn<S> planes_for_isa() {
#if defined(__x86_64__)
  if (cpu_isa() >= CpuIsa::avx2) return planes_avx2<S>;
#endif
  return planes_baseline<S>;
}

template <class S>
void run(const S* in, S* out, int64_t* indices, const Pool2dGeometry& g, int64_t planes) {
  const PlanesFn<S> fn = planes_for_isa<S>();
  parallel_for(planes, g.out_h * g.out_w * g.kernel_h * g.kernel_w,
               [&](int64_t begin, int64_t end) { fn(in, out, indices, g, begin, end); });
}

}  // namespace

void max_pool2d(const Tensor& x, const Tensor& out, const Tensor& indices,
                const Pool2dGeometry& g) {
  const int64_t planes = x.size(0) * x.size(1);
  int64_t* idx = indices.data<int64_t>();
  switch (x.dtype()) {
    case DType::f32:
      return run(x.data<float>(), out.data<float>(), idx, g, planes);
    case DType::f64:
      return run(x.data<double>(), out.data<double>(), idx, g, planes);
    case DType::bf16:
      return run(reinterpret_cast<const uint16_t*>(x.data<BFloat16>()),
                 reinterpret_cast<uint16_t*>(out.data<BFloat16>()), idx, g, planes);
    default:
      KILN_CHECK(false, DTypeError, "max_pool2d: expected f32, f64 or bf16 on the CPU, got {}",
                 dtype_name(x.dtype()));
  }
}

void max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                         const Tensor& grad_input) {
  const int64_t* idx = indices.data<int64_t>();
  const int64_t planes = grad_output.size(0) * grad_output.size(1);
  const int64_t in_plane = grad_input.size(2) * grad_input.size(3);
  const int64_t out_plane = grad_output.size(2) * grad_output.size(3);
  if (grad_output.dtype() == DType::bf16) {
    // Each plane's sums in f32, in a buffer of the thread's, then rounded into grad_input once:
    // the same sums in the same order as in f32 and rounded after, without an f32 grad_input.
    const uint16_t* go = reinterpret_cast<const uint16_t*>(grad_output.data<BFloat16>());
    uint16_t* gi = reinterpret_cast<uint16_t*>(grad_input.data<BFloat16>());
    const auto to_bf16 = convert_kernels().f32_to_bf16;
    parallel_for(planes, in_plane + out_plane, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> sums;
      sums.resize(static_cast<size_t>(in_plane));
      for (int64_t p = begin; p < end; ++p) {
        std::fill(sums.begin(), sums.end(), 0.0f);
        for (int64_t k = 0; k < out_plane; ++k) {
          const int64_t i = idx[p * out_plane + k];
          if (i >= 0 && i < in_plane) sums[i] += Value<uint16_t>::get(go[p * out_plane + k]);
        }
        to_bf16(sums.data(), gi + p * in_plane, in_plane);
      }
    });
    return;
  }
  visit_f32_f64("max_pool2d_backward", grad_output.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* go = grad_output.data<T>();
    T* gi = grad_input.data<T>();
    parallel_for(planes, out_plane, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        for (int64_t k = 0; k < out_plane; ++k) {
          const int64_t i = idx[p * out_plane + k];
          // The += lets overlapping windows that chose the same maximum add their gradients.
          if (i >= 0 && i < in_plane) gi[p * in_plane + i] += go[p * out_plane + k];
        }
      }
    });
  });
}

}  // namespace kiln::cpu
