#include "kiln/kernels/normalization.h"

#include <cmath>
#include <cstdint>

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
  T operator()(T x) const { return x * scale + shift; }
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

}  // namespace

void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var) {
  visit_f32_f64("batch_norm", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* m = mean.data<T>();
    T* v = var.data<T>();
    const int64_t n = x.size(0), channels = x.size(1), s = x.size(2);
    const int64_t count = n * s;
    parallel_for(channels, count, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        // Two passes: the sum of squared deviations from the mean does not cancel the way
        // E[x^2] - E[x]^2 does when the mean is large next to the spread.
        double total = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          const T* row = in + (i * channels + c) * s;
#pragma omp simd reduction(+ : total)
          for (int64_t j = 0; j < s; ++j) total += row[j];
        }
        double mu = count > 0 ? total / static_cast<double>(count) : 0.0;
        double squares = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          const T* row = in + (i * channels + c) * s;
#pragma omp simd reduction(+ : squares)
          for (int64_t j = 0; j < s; ++j) {
            double d = static_cast<double>(row[j]) - mu;
            squares += d * d;
          }
        }
        m[c] = static_cast<T>(mu);
        v[c] = static_cast<T>(count > 0 ? squares / static_cast<double>(count) : 0.0);
      }
    });
  });
}

void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& out, bool relu) {
  visit_f32_f64("batch_norm", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    const T* m = mean.data<T>();
    const T* r = invstd.data<T>();
    const T* w = optional_data<T>(weight);
    const T* b = optional_data<T>(bias);
    T* o = out.data<T>();
    const int64_t channels = x.size(1), s = x.size(2);
    parallel_for(x.size(0) * channels, s, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const ChannelAffine<T> affine(m, r, w, b, row % channels);
        const T* src = in + row * s;
        T* dst = o + row * s;
        if (relu) {
          for (int64_t j = 0; j < s; ++j) {
            const T y = affine(src[j]);
            dst[j] = y < T(0) ? T(0) : y;  // NaN passes, as relu
          }
        } else {
          for (int64_t j = 0; j < s; ++j) dst[j] = affine(src[j]);
        }
      }
    });
  });
}

void batch_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, bool training,
                         const Tensor& grad_x, const Tensor& sum_g, const Tensor& sum_g_xhat,
                         bool relu, const Tensor& bias, DType out_dtype) {
  visit_f32_f64("batch_norm_backward", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T cutoff = relu_cutoff<T>(out_dtype);
    const T* in = x.data<T>();
    const T* g = grad.data<T>();
    const T* m = mean.data<T>();
    const T* r = invstd.data<T>();
    const T* w = optional_data<T>(weight);
    const T* bs = optional_data<T>(bias);
    T* sg = sum_g.data<T>();
    T* sgx = sum_g_xhat.data<T>();
    const int64_t n = x.size(0), channels = x.size(1), s = x.size(2);
    parallel_for(channels, 2 * n * s, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        // Σ g * (x - mean), times invstd once at the end rather than per element.
        double total = 0.0, dot = 0.0;
        const T mu = m[c];
        const ChannelAffine<T> affine(m, r, w, bs, c);
        for (int64_t i = 0; i < n; ++i) {
          const T* xr = in + (i * channels + c) * s;
          const T* gr = g + (i * channels + c) * s;
          T row_total = 0, row_dot = 0;
          if (relu) {
#pragma omp simd reduction(+ : row_total, row_dot)
            for (int64_t j = 0; j < s; ++j) {
              const T gj = affine(xr[j]) <= cutoff ? T(0) : gr[j];  // NaN passes, as relu
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
          total += row_total;
          dot += row_dot;
        }
        sg[c] = static_cast<T>(total);
        sgx[c] = static_cast<T>(dot * static_cast<double>(r[c]));
      }
    });
    if (!grad_x.defined()) return;
    T* dx = grad_x.data<T>();
    const T count = static_cast<T>(n * s);
    parallel_for(n * channels, s, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t c = row % channels;
        const T* xr = in + row * s;
        const T* gr = g + row * s;
        T* out = dx + row * s;
        // dx = a * g - b * x + shift: the training formula expanded so each element costs two
        // multiply-adds; inference keeps only a * g.
        const T a = r[c] * (w ? w[c] : T(1));
        const T b = training && count > 0 ? a * sgx[c] * r[c] / count : T(0);
        const T shift = training && count > 0 ? b * m[c] - a * sg[c] / count : T(0);
        if (relu) {
          const ChannelAffine<T> affine(m, r, w, bs, c);
          for (int64_t j = 0; j < s; ++j)
            out[j] = a * (affine(xr[j]) <= cutoff ? T(0) : gr[j]) - b * xr[j] + shift;
        } else {
          for (int64_t j = 0; j < s; ++j) out[j] = a * gr[j] - b * xr[j] + shift;
        }
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
    .takes_half = false};

}  // namespace kiln
