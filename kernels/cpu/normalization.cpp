#include "kiln/kernels/normalization.h"

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/core/cpu_isa.h"
#include "kiln/core/half.h"
#include "kiln/kernels/cpu/convert/convert.h"
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

// How the row loops see a dtype's rows: f32 and f64 as they are; bf16 as its bits, widened and
// rounded in registers by the loops themselves (a bf16 is a float's top half: widening is a shift,
// rounding BFloat16's integer sum, both vectorise); f16 widened to f32 a row at a time into a
// buffer by the vectorised conversions. (Widening bf16 rows into buffers too cost more than the
// loops at 7x7: three conversion calls per 49-element row.)
template <class T>
struct Storage {
  using type = T;
};
template <>
struct Storage<BFloat16> {
  using type = uint16_t;
};
template <>
struct Storage<Half> {
  using type = float;
};

// A bf16's bits (or an f32/f64 value) as the compute type, and back: BFloat16's conversions
// (core/half.h) written without its early return for NaN, so that the loops vectorise; the
// forward test compares the results bit for bit with BFloat16's rounding.
[[gnu::always_inline]] inline float load(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}
[[gnu::always_inline]] inline float load(float v) {
  return v;
}
[[gnu::always_inline]] inline double load(double v) {
  return v;
}

template <class S, class A>
[[gnu::always_inline]] inline S store(A v) {
  if constexpr (std::is_same_v<S, uint16_t>) {
    const uint32_t u = std::bit_cast<uint32_t>(v);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x0040u;
    return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  } else {
    return v;
  }
}

// A dtype's rows as the row loops take them (Storage<T>): read() gives row `row` (of s elements),
// widened into a buffer of the thread's for f16 (`slot` 0, 1 or 2 tells apart the rows one loop
// holds at once); target() is where to compute a row whose result goes to `row`, the row itself
// or a buffer (`slot` 3 or 4) that write() then narrows into it.
template <class T>
class Rows {
 public:
  using A = acc_type_t<T>;
  using S = typename Storage<T>::type;
  static constexpr bool kWidened = std::is_same_v<T, Half>;

  const S* read(const T* row, int64_t s, int slot) {
    if constexpr (kWidened) {
      S* buffer = scratch(slot, s);
      convert_kernels().f16_to_f32(&row->bits, buffer, s);
      return buffer;
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      return &row->bits;
    } else {
      return row;
    }
  }
  S* target(T* row, int64_t s, int slot = 3) {
    if constexpr (kWidened) {
      return scratch(slot, s);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      return &row->bits;
    } else {
      return row;
    }
  }
  void write(const S* result, T* row, int64_t s) {
    if constexpr (kWidened) convert_kernels().f32_to_f16(result, &row->bits, s);
  }

 private:
  static S* scratch(int slot, int64_t s) {
    thread_local std::vector<S> buffers[5];
    std::vector<S>& b = buffers[slot];
    if (b.size() < static_cast<size_t>(s)) b.resize(static_cast<size_t>(s));
    return b.data();
  }
};

// The per-row loops of batch norm, written once as always-inlined templates over the rows'
// storage S and, for f32 and bf16's bits, compiled three times below: for the plain target and,
// through the target attribute, for AVX2 and AVX-512, picked by core/cpu_isa.h as the
// convolution's tiles are. (A portable build left to
// SSE2 ran the backward's loops at a quarter of AVX-512's speed.) Being inlined, the bodies take
// the instruction set of the function they are inlined into; nothing compiled for AVX2 or AVX-512
// has a name another file could share.
template <class A, class S>
[[gnu::always_inline]] inline void apply_row(const S* src, S* dst, int64_t s,
                                             ChannelAffine<A> affine, bool relu,
                                             const S* residual) {
  if (residual) {
    for (int64_t j = 0; j < s; ++j) {
      const A y = affine(load(src[j])) + load(residual[j]);
      dst[j] = store<S>(y < A(0) ? A(0) : y);  // NaN passes, as relu
    }
  } else if (relu) {
    for (int64_t j = 0; j < s; ++j) {
      const A y = affine(load(src[j]));
      dst[j] = store<S>(y < A(0) ? A(0) : y);  // NaN passes, as relu
    }
  } else {
    for (int64_t j = 0; j < s; ++j) dst[j] = store<S>(affine(load(src[j])));
  }
}

// Sums over a row of per-element terms (term(j, first, second) sets element j's), each in
// kPartialSums running sums that the compiler keeps in vectors: one running sum per vector made
// every add wait for the one before it, and the loop ran at half the speed of its loads (bf16
// rows of 784 on a Zen 5: 0.35 ms per 1.6M elements against 0.17).
inline constexpr int64_t kPartialSums = 32;

template <class A, class Term>
[[gnu::always_inline]] inline void row_sums(int64_t s, Term term, A* first, A* second) {
  A p[kPartialSums] = {}, q[kPartialSums] = {};
  int64_t j = 0;
  for (; j + kPartialSums <= s; j += kPartialSums) {
    for (int64_t k = 0; k < kPartialSums; ++k) {
      A a, b;
      term(j + k, a, b);
      p[k] += a;
      q[k] += b;
    }
  }
  for (int64_t k = 0; j < s; ++j, ++k) {
    A a, b;
    term(j, a, b);
    p[k] += a;
    q[k] += b;
  }
  A total_p = 0, total_q = 0;
  for (int64_t k = 0; k < kPartialSums; ++k) {
    total_p += p[k];
    total_q += q[k];
  }
  *first = total_p;
  *second = total_q;
}

// The same for one term, term(j) element j's.
template <class A, class Term>
[[gnu::always_inline]] inline A row_sum(int64_t s, Term term) {
  A total, none;
  row_sums<A>(
      s,
      [&](int64_t j, A& value, A& zero) {
        value = term(j);
        zero = 0;
      },
      &total, &none);
  return total;
}

// Σ g and Σ g * (x - mu) over a row, g masked by the fused ReLU: from the stored output where
// there is one (the forward had a residual), else from y worked out again when relu.
template <class A, class S>
[[gnu::always_inline]] inline void sums_row(const S* xr, const S* gr, int64_t s,
                                            ChannelAffine<A> affine, A cutoff, A mu, bool relu,
                                            const S* output, A* total, A* dot) {
  if (output) {
    row_sums<A>(
        s,
        [&](int64_t j, A& g, A& gx) {
          g = load(output[j]) <= A(0) ? A(0) : load(gr[j]);  // NaN passes, as relu
          gx = g * (load(xr[j]) - mu);
        },
        total, dot);
  } else if (relu) {
    row_sums<A>(
        s,
        [&](int64_t j, A& g, A& gx) {
          g = affine(load(xr[j])) <= cutoff ? A(0) : load(gr[j]);  // NaN passes, as relu
          gx = g * (load(xr[j]) - mu);
        },
        total, dot);
  } else {
    row_sums<A>(
        s,
        [&](int64_t j, A& g, A& gx) {
          g = load(gr[j]);
          gx = g * (load(xr[j]) - mu);
        },
        total, dot);
  }
}

// dx = a * g - b * x + shift (out null: none), g masked as in sums_row; with an output, the
// masked g itself to masked (null: not wanted), the residual's gradient.
template <class A, class S>
[[gnu::always_inline]] inline void grad_x_row(const S* xr, const S* gr, S* out, int64_t s, A a, A b,
                                              A shift, ChannelAffine<A> affine, A cutoff, bool relu,
                                              const S* output, S* masked) {
  if (output && masked) {
    // g itself where the ReLU passed: exact in S (a bf16 g widened and rounded again is itself).
    for (int64_t j = 0; j < s; ++j) masked[j] = load(output[j]) <= A(0) ? S(0) : gr[j];
  }
  if (!out) return;
  if (output) {
    for (int64_t j = 0; j < s; ++j) {
      const A gj = load(output[j]) <= A(0) ? A(0) : load(gr[j]);
      out[j] = store<S>(a * gj - b * load(xr[j]) + shift);
    }
  } else if (relu) {
    for (int64_t j = 0; j < s; ++j) {
      const A gj = affine(load(xr[j])) <= cutoff ? A(0) : load(gr[j]);
      out[j] = store<S>(a * gj - b * load(xr[j]) + shift);
    }
  } else {
    for (int64_t j = 0; j < s; ++j) out[j] = store<S>(a * load(gr[j]) - b * load(xr[j]) + shift);
  }
}

// A row's mean and its sum of squared deviations from that mean: the two passes of the exact
// formula, over a row that stays in L1 between them. Rows combine by Chan's formula in double
// (batch_norm_stats), so the activations are read from memory once. f64 rows sum in double;
// f32 and 16-bit rows in float vectors (twice the lanes of double ones, no conversions), of the
// values less the row's first one, so that what is summed is as small as the row's spread, not
// its mean; the row's mean is put back together in double.
template <class S>
[[gnu::always_inline]] inline void moments_row(const S* row, int64_t s, double* mean, double* m2) {
  if (s <= 0) {
    *mean = 0.0;
    *m2 = 0.0;
    return;
  }
  using Sum = std::conditional_t<std::is_same_v<S, double>, double, float>;
  const Sum first = load(row[0]);
  const Sum shifted = row_sum<Sum>(s, [&](int64_t j) { return load(row[j]) - first; });
  const Sum shift_mean = shifted / static_cast<Sum>(s);
  const Sum squares = row_sum<Sum>(s, [&](int64_t j) {
    const Sum d = (load(row[j]) - first) - shift_mean;
    return d * d;
  });
  *mean = static_cast<double>(first) + static_cast<double>(shifted) / static_cast<double>(s);
  *m2 = static_cast<double>(squares);
}

// The loops over rows of S (Storage<T>) computing in A.
template <class A, class S>
struct RowLoops {
  void (*moments)(const S*, int64_t, double*, double*);
  void (*apply)(const S*, S*, int64_t, ChannelAffine<A>, bool, const S*);
  void (*sums)(const S*, const S*, int64_t, ChannelAffine<A>, A, A, bool, const S*, A*, A*);
  void (*grad_x)(const S*, const S*, S*, int64_t, A, A, A, ChannelAffine<A>, A, bool, const S*, S*);
};

// KILN_BATCH_NORM_ROWS(name, S, attributes): the loops over rows of S (float, or bf16's bits),
// computing in float, compiled with `attributes` as name##_rows.
#define KILN_BATCH_NORM_ROWS(name, S, attributes)                                                  \
  attributes void moments_##name(const S* row, int64_t s, double* mean, double* m2) {              \
    moments_row(row, s, mean, m2);                                                                 \
  }                                                                                                \
  attributes void apply_##name(const S* src, S* dst, int64_t s, ChannelAffine<float> affine,       \
                               bool relu, const S* residual) {                                     \
    apply_row(src, dst, s, affine, relu, residual);                                                \
  }                                                                                                \
  attributes void sums_##name(const S* xr, const S* gr, int64_t s, ChannelAffine<float> affine,    \
                              float cutoff, float mu, bool relu, const S* output, float* total,    \
                              float* dot) {                                                        \
    sums_row(xr, gr, s, affine, cutoff, mu, relu, output, total, dot);                             \
  }                                                                                                \
  attributes void grad_x_##name(const S* xr, const S* gr, S* out, int64_t s, float a, float b,     \
                                float shift, ChannelAffine<float> affine, float cutoff, bool relu, \
                                const S* output, S* masked) {                                      \
    grad_x_row(xr, gr, out, s, a, b, shift, affine, cutoff, relu, output, masked);                 \
  }                                                                                                \
  const RowLoops<float, S> name##_rows{moments_##name, apply_##name, sums_##name, grad_x_##name};

#define KILN_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KILN_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))
KILN_BATCH_NORM_ROWS(baseline, float, )
KILN_BATCH_NORM_ROWS(baseline_bf16, uint16_t, )
#if defined(__x86_64__)
KILN_BATCH_NORM_ROWS(avx2, float, KILN_AVX2)
KILN_BATCH_NORM_ROWS(avx2_bf16, uint16_t, KILN_AVX2)
KILN_BATCH_NORM_ROWS(avx512, float, KILN_AVX512)
KILN_BATCH_NORM_ROWS(avx512_bf16, uint16_t, KILN_AVX512)
#endif
#undef KILN_AVX2
#undef KILN_AVX512
#undef KILN_BATCH_NORM_ROWS

// f64 keeps the plain target; f32 and the 16-bit floats (bf16 as its bits, f16 widened to f32)
// take the version of the instruction set in use.
template <class A, class S>
RowLoops<A, S> row_loops() {
  if constexpr (std::is_same_v<S, uint16_t>) {
#if defined(__x86_64__)
    if (cpu_isa() >= CpuIsa::avx512) return avx512_bf16_rows;
    if (cpu_isa() >= CpuIsa::avx2) return avx2_bf16_rows;
#endif
    return baseline_bf16_rows;
  } else if constexpr (std::is_same_v<A, float>) {
#if defined(__x86_64__)
    if (cpu_isa() >= CpuIsa::avx512) return avx512_rows;
    if (cpu_isa() >= CpuIsa::avx2) return avx2_rows;
#endif
    return baseline_rows;
  } else {
    return {moments_row<S>, apply_row<A, S>, sums_row<A, S>, grad_x_row<A, S>};
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
    using S = typename Storage<T>::type;
    const RowLoops<A, S> loops = row_loops<A, S>();
    // Each row's mean and squared deviations first, the rows taken in memory order, then the
    // rows of a channel combined in order by Chan's formula: as exact as two passes over the
    // channel (no E[x^2] - E[x]^2 cancellation), with one read of it. (Walking down a channel's
    // rows instead, one short stream per row, read them at half the speed.)
    std::vector<double> moments(static_cast<size_t>(2 * n * channels));
    parallel_for(n * channels, s, [&](int64_t begin, int64_t end) {
      Rows<T> rows;
      for (int64_t row = begin; row < end; ++row)
        loops.moments(rows.read(in + row * s, s, 0), s, &moments[2 * row], &moments[2 * row + 1]);
    });
    parallel_for(channels, 4 * n, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        double seen = 0.0, mu = 0.0, squares = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          const double row_mean = moments[2 * (i * channels + c)];
          const double row_squares = moments[2 * (i * channels + c) + 1];
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
    using S = typename Storage<T>::type;
    const RowLoops<A, S> loops = row_loops<A, S>();
    parallel_for(x.size(0) * channels, s, [&](int64_t begin, int64_t end) {
      Rows<T> rows;
      for (int64_t row = begin; row < end; ++row) {
        const S* src = rows.read(in + row * s, s, 0);
        const S* res_row = res ? rows.read(res + row * s, s, 1) : nullptr;
        S* dst = rows.target(o + row * s, s);
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
    using S = typename Storage<T>::type;
    const RowLoops<A, S> loops = row_loops<A, S>();
    // Each row's Σ g and Σ g * (x - mean) first, the rows taken in memory order, then summed per
    // channel in row order in double; times invstd once at the end rather than per element.
    std::vector<A> row_sums(static_cast<size_t>(2 * n * channels));
    parallel_for(n * channels, 2 * s, [&](int64_t begin, int64_t end) {
      Rows<T> rows;
      for (int64_t row = begin; row < end; ++row) {
        const int64_t c = row % channels;
        const S* xr = rows.read(in + row * s, s, 0);
        const S* gr = rows.read(g + row * s, s, 1);
        const S* yr = y ? rows.read(y + row * s, s, 2) : nullptr;
        loops.sums(xr, gr, s, ChannelAffine<A>(m, r, w, bs, c), cutoff, m[c], relu, yr,
                   &row_sums[2 * row], &row_sums[2 * row + 1]);
      }
    });
    parallel_for(channels, 2 * n, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        double total = 0.0, dot = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          total += row_sums[2 * (i * channels + c)];
          dot += row_sums[2 * (i * channels + c) + 1];
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
        const S* xr = dx ? rows.read(in + row * s, s, 0) : nullptr;
        const S* gr = rows.read(g + row * s, s, 1);
        const S* yr = y ? rows.read(y + row * s, s, 2) : nullptr;
        S* out = dx ? rows.target(dx + row * s, s) : nullptr;
        // The residual's gradient: g where the ReLU passed, exact in T (a 16-bit g widened and
        // narrowed again is the same value).
        S* masked = dr ? rows.target(dr + row * s, s, 4) : nullptr;
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
