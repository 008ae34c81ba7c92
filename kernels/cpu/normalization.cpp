#include "kiln/kernels/normalization.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/core/cpu_isa.h"
#include "kiln/kernels/cpu/convert.h"
#include "kiln/kernels/cpu/loops.h"

namespace kiln::cpu {

namespace {

template <class T>
const T* optional_data(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Channel c's normalisation folded into one multiply-add, y = x * scale + shift: the forward and
// the fused ReLU's backward both take it from here, so they round alike.
template <class T>
struct ChannelAffine {
  T scale, shift;
  ChannelAffine(const T* mean, const T* invstd, const T* weight, const T* bias, int64_t c)
      : scale(invstd[c] * (weight ? weight[c] : T(1))),
        shift((bias ? bias[c] : T(0)) - mean[c] * scale) {}
  // Inlined into the per-ISA row loops below (a call per element would cost more than the loop).
  [[gnu::always_inline]] T operator()(T x) const { return x * scale + shift; }
};

// The largest y that the fused ReLU's output, stored in out_dtype, holds as 0: half the smallest
// positive 16-bit float, a tie that rounds to even, to 0 (as does everything below it); 0 where
// the output keeps T. The backward passes the gradient only above it, where the stored output is
// positive.
template <class T>
T relu_cutoff(DType out_dtype) {
  switch (out_dtype) {
    case DType::f16:
      return static_cast<T>(static_cast<double>(static_cast<float>(Half::from_bits(1))) / 2);
    case DType::bf16:
      return static_cast<T>(static_cast<double>(static_cast<float>(BFloat16::from_bits(1))) / 2);
    default:
      return T(0);
  }
}

// Batch norm's activations (x, grad, out, grad_x) in f32, f64, f16 or bf16 (takes_half): f(tag)
// with tag's type the activations' and acc_type_t of it the statistics', weight's and sums'.
template <class F>
void visit_activation(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f16:
      return f(TypeTag<Half>{});
    case DType::bf16:
      return f(TypeTag<BFloat16>{});
    default:
      return visit_f32_f64(op, dtype, f);
  }
}

// Rows of 16-bit activations are widened to f32 (and results narrowed back) a row at a time, in
// a buffer of the thread's, by the vectorised conversions of the instruction set in use; rows of
// f32 and f64 are used as they are.
template <class T>
class Rows {
 public:
  using A = acc_type_t<T>;
  static constexpr bool kWidened = !std::is_same_v<T, A>;

  // Row `row` (of s elements) as A values; `slot` (0, 1 or 2) tells apart the rows one loop holds
  // at once.
  const A* read(const T* row, int64_t s, int slot) {
    if constexpr (kWidened) {
      A* buffer = scratch(slot, s);
      if constexpr (std::is_same_v<T, Half>)
        convert_kernels().f16_to_f32(&row->bits, buffer, s);
      else
        convert_kernels().bf16_to_f32(&row->bits, buffer, s);
      return buffer;
    } else {
      return row;
    }
  }
  // Where to compute a row whose result goes to `row`: the row itself, or a buffer (`slot` 3 or
  // 4) that write() then narrows into it.
  A* target(T* row, int64_t s, int slot = 3) {
    if constexpr (kWidened)
      return scratch(slot, s);
    else
      return row;
  }
  void write(const A* result, T* row, int64_t s) {
    if constexpr (kWidened) {
      if constexpr (std::is_same_v<T, Half>)
        convert_kernels().f32_to_f16(result, &row->bits, s);
      else
        convert_kernels().f32_to_bf16(result, &row->bits, s);
    }
  }

 private:
  static A* scratch(int slot, int64_t s) {
    thread_local std::vector<A> buffers[5];
    std::vector<A>& b = buffers[slot];
    if (b.size() < static_cast<size_t>(s)) b.resize(static_cast<size_t>(s));
    return b.data();
  }
};

// The three per-row loops of batch norm, written once as always-inlined templates and, for f32,
// compiled three times below: for the plain target and, through the target attribute, for AVX2
// and AVX-512, picked by core/cpu_isa.h as the convolution's tiles are. (A portable build left to
// SSE2 ran the backward's loops at a quarter of AVX-512's speed.) Being inlined, the bodies take
// the instruction set of the function they are inlined into; nothing compiled for AVX2 or AVX-512
// has a name another file could share.
template <class A>
[[gnu::always_inline]] inline void apply_row(const A* src, A* dst, int64_t s,
                                             ChannelAffine<A> affine, bool relu,
                                             const A* residual) {
  if (residual) {
    for (int64_t j = 0; j < s; ++j) {
      const A y = affine(src[j]) + residual[j];
      dst[j] = y < A(0) ? A(0) : y;  // NaN passes, as relu
    }
  } else if (relu) {
    for (int64_t j = 0; j < s; ++j) {
      const A y = affine(src[j]);
      dst[j] = y < A(0) ? A(0) : y;  // NaN passes, as relu
    }
  } else {
    for (int64_t j = 0; j < s; ++j) dst[j] = affine(src[j]);
  }
}

// Σ g and Σ g * (x - mu) over a row, g masked by the fused ReLU: from the stored output where
// there is one (the forward had a residual), else from y worked out again when relu.
template <class A>
[[gnu::always_inline]] inline void sums_row(const A* xr, const A* gr, int64_t s,
                                            ChannelAffine<A> affine, A cutoff, A mu, bool relu,
                                            const A* output, A* total, A* dot) {
  A row_total = 0, row_dot = 0;
  if (output) {
#pragma omp simd reduction(+ : row_total, row_dot)
    for (int64_t j = 0; j < s; ++j) {
      const A gj = output[j] <= A(0) ? A(0) : gr[j];  // NaN passes, as relu
      row_total += gj;
      row_dot += gj * (xr[j] - mu);
    }
  } else if (relu) {
#pragma omp simd reduction(+ : row_total, row_dot)
    for (int64_t j = 0; j < s; ++j) {
      const A gj = affine(xr[j]) <= cutoff ? A(0) : gr[j];  // NaN passes, as relu
      row_total += gj;
      row_dot += gj * (xr[j] - mu);
    }
  } else {
#pragma omp simd reduction(+ : row_total, row_dot)
    for (int64_t j = 0; j < s; ++j) {
      row_total += gr[j];
      row_dot += gr[j] * (xr[j] - mu);
    }
  }
  *total = row_total;
  *dot = row_dot;
}

// dx = a * g - b * x + shift (out null: none), g masked as in sums_row; with an output, the
// masked g itself to masked (null: not wanted), the residual's gradient.
template <class A>
[[gnu::always_inline]] inline void grad_x_row(const A* xr, const A* gr, A* out, int64_t s, A a, A b,
                                              A shift, ChannelAffine<A> affine, A cutoff, bool relu,
                                              const A* output, A* masked) {
  if (output && masked) {
    for (int64_t j = 0; j < s; ++j) masked[j] = output[j] <= A(0) ? A(0) : gr[j];
  }
  if (!out) return;
  if (output) {
    for (int64_t j = 0; j < s; ++j)
      out[j] = a * (output[j] <= A(0) ? A(0) : gr[j]) - b * xr[j] + shift;
  } else if (relu) {
    for (int64_t j = 0; j < s; ++j)
      out[j] = a * (affine(xr[j]) <= cutoff ? A(0) : gr[j]) - b * xr[j] + shift;
  } else {
    for (int64_t j = 0; j < s; ++j) out[j] = a * gr[j] - b * xr[j] + shift;
  }
}

// A row's mean and its sum of squared deviations from that mean, in double: the two passes of
// the exact formula, over a row that stays in L1 between them. Rows combine by Chan's formula
// (batch_norm_stats), so the activations are read from memory once.
template <class A>
[[gnu::always_inline]] inline void moments_row(const A* row, int64_t s, double* mean, double* m2) {
  double total = 0.0;
#pragma omp simd reduction(+ : total)
  for (int64_t j = 0; j < s; ++j) total += row[j];
  const double mu = s > 0 ? total / static_cast<double>(s) : 0.0;
  double squares = 0.0;
#pragma omp simd reduction(+ : squares)
  for (int64_t j = 0; j < s; ++j) {
    const double d = static_cast<double>(row[j]) - mu;
    squares += d * d;
  }
  *mean = mu;
  *m2 = squares;
}

template <class A>
struct RowLoops {
  void (*moments)(const A*, int64_t, double*, double*);
  void (*apply)(const A*, A*, int64_t, ChannelAffine<A>, bool, const A*);
  void (*sums)(const A*, const A*, int64_t, ChannelAffine<A>, A, A, bool, const A*, A*, A*);
  void (*grad_x)(const A*, const A*, A*, int64_t, A, A, A, ChannelAffine<A>, A, bool, const A*, A*);
};

#define KILN_BATCH_NORM_ROWS(name, attributes)                                                    \
  attributes void moments_##name(const float* row, int64_t s, double* mean, double* m2) {          \
    moments_row(row, s, mean, m2);                                                                \
  }                                                                                               \
  attributes void apply_##name(const float* src, float* dst, int64_t s,                           \
                               ChannelAffine<float> affine, bool relu, const float* residual) {   \
    apply_row(src, dst, s, affine, relu, residual);                                               \
  }                                                                                               \
  attributes void sums_##name(const float* xr, const float* gr, int64_t s,                        \
                              ChannelAffine<float> affine, float cutoff, float mu, bool relu,     \
                              const float* output, float* total, float* dot) {                    \
    sums_row(xr, gr, s, affine, cutoff, mu, relu, output, total, dot);                            \
  }                                                                                               \
  attributes void grad_x_##name(const float* xr, const float* gr, float* out, int64_t s, float a, \
                                float b, float shift, ChannelAffine<float> affine, float cutoff,  \
                                bool relu, const float* output, float* masked) {                  \
    grad_x_row(xr, gr, out, s, a, b, shift, affine, cutoff, relu, output, masked);                \
  }                                                                                               \
  const RowLoops<float> name##_rows{moments_##name, apply_##name, sums_##name, grad_x_##name};

KILN_BATCH_NORM_ROWS(baseline, )
#if defined(__x86_64__)
KILN_BATCH_NORM_ROWS(avx2, __attribute__((target("avx2,fma,f16c"))))
KILN_BATCH_NORM_ROWS(avx512, __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl"))))
#endif
#undef KILN_BATCH_NORM_ROWS

// f64 keeps the plain target; f32 (and the 16-bit floats, widened to it) takes the version of the
// instruction set in use.
template <class A>
RowLoops<A> row_loops() {
  if constexpr (std::is_same_v<A, float>) {
#if defined(__x86_64__)
    if (cpu_isa() >= CpuIsa::avx512) return avx512_rows;
    if (cpu_isa() >= CpuIsa::avx2) return avx2_rows;
#endif
    return baseline_rows;
  } else {
    return {moments_row<A>, apply_row<A>, sums_row<A>, grad_x_row<A>};
  }
}

}  // namespace

void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var) {
  visit_activation("batch_norm", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_type_t<T>;
    const T* in = x.data<T>();
    A* m = mean.data<A>();
    A* v = var.data<A>();
    const int64_t n = x.size(0), channels = x.size(1), s = x.size(2);
    const int64_t count = n * s;
    const RowLoops<A> loops = row_loops<A>();
    parallel_for(channels, count, [&](int64_t begin, int64_t end) {
      Rows<T> rows;
      for (int64_t c = begin; c < end; ++c) {
        // Each row's mean and squared deviations, combined by Chan's formula: as exact as two
        // passes over the channel (no E[x^2] - E[x]^2 cancellation), with one read of it.
        double seen = 0.0, mu = 0.0, squares = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          double row_mean = 0.0, row_squares = 0.0;
          loops.moments(rows.read(in + (i * channels + c) * s, s, 0), s, &row_mean, &row_squares);
          const double both = seen + static_cast<double>(s);
          if (both == 0.0) continue;
          const double delta = row_mean - mu;
          mu += delta * static_cast<double>(s) / both;
          squares += row_squares + delta * delta * seen * static_cast<double>(s) / both;
          seen = both;
        }
        m[c] = static_cast<A>(mu);
        v[c] = static_cast<A>(count > 0 ? squares / static_cast<double>(count) : 0.0);
      }
    });
  });
}

void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& out, bool relu,
                      const Tensor& residual) {
  visit_activation("batch_norm", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_type_t<T>;
    const T* in = x.data<T>();
    const A* m = mean.data<A>();
    const A* r = invstd.data<A>();
    const A* w = optional_data<A>(weight);
    const A* b = optional_data<A>(bias);
    const T* res = optional_data<T>(residual);
    T* o = out.data<T>();
    const int64_t channels = x.size(1), s = x.size(2);
    const RowLoops<A> loops = row_loops<A>();
    parallel_for(x.size(0) * channels, s, [&](int64_t begin, int64_t end) {
      Rows<T> rows;
      for (int64_t row = begin; row < end; ++row) {
        const A* src = rows.read(in + row * s, s, 0);
        const A* res_row = res ? rows.read(res + row * s, s, 1) : nullptr;
        A* dst = rows.target(o + row * s, s);
        loops.apply(src, dst, s, ChannelAffine<A>(m, r, w, b, row % channels), relu, res_row);
        rows.write(dst, o + row * s, s);
      }
    });
  });
}

void batch_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, bool training,
                         const Tensor& grad_x, const Tensor& sum_g, const Tensor& sum_g_xhat,
                         bool relu, const Tensor& bias, DType out_dtype, const Tensor& output,
                         const Tensor& grad_residual) {
  visit_activation("batch_norm_backward", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_type_t<T>;
    const A cutoff = relu_cutoff<A>(out_dtype);
    const T* in = x.data<T>();
    const T* g = grad.data<T>();
    const A* m = mean.data<A>();
    const A* r = invstd.data<A>();
    const A* w = optional_data<A>(weight);
    const A* bs = optional_data<A>(bias);
    const T* y = optional_data<T>(output);
    A* sg = sum_g.data<A>();
    A* sgx = sum_g_xhat.data<A>();
    const int64_t n = x.size(0), channels = x.size(1), s = x.size(2);
    const RowLoops<A> loops = row_loops<A>();
    parallel_for(channels, 2 * n * s, [&](int64_t begin, int64_t end) {
      Rows<T> rows;
      for (int64_t c = begin; c < end; ++c) {
        // Σ g * (x - mean), times invstd once at the end rather than per element.
        double total = 0.0, dot = 0.0;
        const A mu = m[c];
        const ChannelAffine<A> affine(m, r, w, bs, c);
        for (int64_t i = 0; i < n; ++i) {
          const A* xr = rows.read(in + (i * channels + c) * s, s, 0);
          const A* gr = rows.read(g + (i * channels + c) * s, s, 1);
          const A* yr = y ? rows.read(y + (i * channels + c) * s, s, 2) : nullptr;
          A row_total = 0, row_dot = 0;
          loops.sums(xr, gr, s, affine, cutoff, mu, relu, yr, &row_total, &row_dot);
          total += row_total;
          dot += row_dot;
        }
        sg[c] = static_cast<A>(total);
        sgx[c] = static_cast<A>(dot * static_cast<double>(r[c]));
      }
    });
    if (!grad_x.defined() && !grad_residual.defined()) return;
    T* dx = grad_x.defined() ? grad_x.data<T>() : nullptr;
    T* dr = grad_residual.defined() ? grad_residual.data<T>() : nullptr;
    const A count = static_cast<A>(n * s);
    parallel_for(n * channels, s, [&](int64_t begin, int64_t end) {
      Rows<T> rows;
      for (int64_t row = begin; row < end; ++row) {
        const int64_t c = row % channels;
        // x only for grad_x: the residual's gradient alone needs g and the output.
        const A* xr = dx ? rows.read(in + row * s, s, 0) : nullptr;
        const A* gr = rows.read(g + row * s, s, 1);
        const A* yr = y ? rows.read(y + row * s, s, 2) : nullptr;
        A* out = dx ? rows.target(dx + row * s, s) : nullptr;
        // The residual's gradient: g where the ReLU passed, exact in T (a 16-bit g widened and
        // narrowed again is the same value).
        A* masked = dr ? rows.target(dr + row * s, s, 4) : nullptr;
        // dx = a * g - b * x + shift: the training formula expanded so each element costs two
        // multiply-adds; inference keeps only a * g.
        const A a = r[c] * (w ? w[c] : A(1));
        const A b = training && count > 0 ? a * sgx[c] * r[c] / count : A(0);
        const A shift = training && count > 0 ? b * m[c] - a * sg[c] / count : A(0);
        loops.grad_x(xr, gr, out, s, a, b, shift, ChannelAffine<A>(m, r, w, bs, c), cutoff, relu,
                     yr, masked);
        if (out) rows.write(out, dx + row * s, s);
        if (masked) rows.write(masked, dr + row * s, s);
      }
    });
  });
}

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                const Tensor& out, const Tensor& mean, const Tensor& invstd) {
  visit_f32_f64("layer_norm", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    const T* w = optional_data<T>(weight);
    const T* b = optional_data<T>(bias);
    T* o = out.data<T>();
    T* m = mean.data<T>();
    T* r = invstd.data<T>();
    const int64_t rows = x.size(0), k = x.size(1);
    parallel_for(rows, k, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T* src = in + row * k;
        double total = 0.0;
        for (int64_t j = 0; j < k; ++j) total += src[j];
        double mu = k > 0 ? total / static_cast<double>(k) : 0.0;
        double squares = 0.0;
        for (int64_t j = 0; j < k; ++j) {
          double d = static_cast<double>(src[j]) - mu;
          squares += d * d;
        }
        double var = k > 0 ? squares / static_cast<double>(k) : 0.0;
        double rstd = 1.0 / std::sqrt(var + eps);
        m[row] = static_cast<T>(mu);
        r[row] = static_cast<T>(rstd);
        T* dst = o + row * k;
        for (int64_t j = 0; j < k; ++j) {
          double y = (static_cast<double>(src[j]) - mu) * rstd;
          dst[j] = static_cast<T>(y) * (w ? w[j] : T(1)) + (b ? b[j] : T(0));
        }
      }
    });
  });
}

}  // namespace kiln::cpu

namespace kiln {

const NormalizationKernels NormalizationKernels::cpu{
    .batch_norm_stats = cpu::batch_norm_stats,
    .batch_norm_apply = cpu::batch_norm_apply,
    .batch_norm_backward = cpu::batch_norm_backward,
    .layer_norm = cpu::layer_norm,
    .fuses_relu = true,
    .takes_half = true};

}  // namespace kiln
