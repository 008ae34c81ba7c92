// Batch norm's statistics, normalisation and backward, and layer norm's forward, in f32 and f64;
// batch norm also reads and writes f16/bf16 activations, with f32 statistics and parameters (the
// table's takes_half), so autocast's 16-bit activations need no conversion pass. Every sum is taken
// in double, two-pass (the mean first, then squared deviations from it), as on the CPU
// (kernels/cpu/normalization.cpp).
//
//   batch_norm_stats, batch_norm_backward: one block of kChannelThreads per channel, reducing over
//     N and S with row_allreduce (block_reduce.cuh). A channel's sums then need no second kernel
//     and no atomics, and its statistics come out in the same order on every run.
//   batch_norm_apply: one thread per element (grid-stride), scale and shift read per channel; with
//     relu, the ReLU that follows batch norm in a ResNet in the same pass (fuses_relu), and its
//     backward in batch_norm_backward, which works the mask out again from x (channel_affine).
//   layer_norm: one warp per row (kThreads / 32 rows a block, grid-stride over rows). A row (the
//     features of one position) is short next to a channel (all of N and S), so a warp covers it
//     and its sums need shuffles only, no barrier.
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/block_reduce.cuh"
#include "kiln/kernels/cuda/device_types.cuh"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/normalization.h"

namespace kiln::cuda {

namespace {

// The per-channel kernels run one block per channel, so with few channels a wide block is what
// keeps the memory system busy (row_allreduce handles up to 1024 threads).
constexpr int kChannelThreads = 512;

template <class T>
const T* optional_data(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <class T>
T* optional_out(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// A tensor's elements as device type T (__half and __nv_bfloat16 for the 16-bit floats, whose
// bits are kiln's Half and BFloat16).
template <class T>
T* data_as(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// The block's total of one double per thread, in every thread; calls may follow each other on the
// same `shared`.
__device__ double block_sum(double v, RowReduceSmem<double>& shared) {
  return row_allreduce(v, Sum{}, 0.0, shared);
}

// A block walks one channel of [N, C, S] as a grid of width x rows threads: consecutive threads
// read consecutive spatial positions when S is wide, and different images when S is narrow.
struct ChannelWalk {
  int width;  // power of two dividing blockDim.x
  int rows;   // blockDim.x / width
};

ChannelWalk channel_walk(int64_t s) {
  int width = 1;
  while (width < kChannelThreads && width < s) width *= 2;
  return {width, kChannelThreads / width};
}

// T is the activations' device type, P the statistics' and parameters' (float for the 16-bit
// activations, T otherwise).
template <class T, class P>
__global__ void batch_norm_stats_kernel(const T* __restrict__ x, P* __restrict__ mean,
                                        P* __restrict__ var, int64_t n, int64_t channels, int64_t s,
                                        ChannelWalk walk) {
  __shared__ RowReduceSmem<double> shared;
  const int64_t c = blockIdx.x;
  const int tx = threadIdx.x % walk.width, ty = threadIdx.x / walk.width;
  const int64_t count = n * s;
  // Two passes, as the CPU: squared deviations from the mean do not cancel the way
  // E[x^2] - E[x]^2 does when the mean is large next to the spread.
  double total = 0.0;
  for (int64_t i = ty; i < n; i += walk.rows) {
    const T* row = x + (i * channels + c) * s;
    for (int64_t j = tx; j < s; j += walk.width) total += device_convert<double>(row[j]);
  }
  total = block_sum(total, shared);
  const double mu = count > 0 ? total / static_cast<double>(count) : 0.0;
  double squares = 0.0;
  for (int64_t i = ty; i < n; i += walk.rows) {
    const T* row = x + (i * channels + c) * s;
    for (int64_t j = tx; j < s; j += walk.width) {
      const double d = device_convert<double>(row[j]) - mu;
      squares += d * d;
    }
  }
  squares = block_sum(squares, shared);
  if (threadIdx.x == 0) {
    mean[c] = static_cast<P>(mu);
    var[c] = static_cast<P>(count > 0 ? squares / static_cast<double>(count) : 0.0);
  }
}

__device__ inline float mul_rn(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ inline double mul_rn(double a, double b) {
  return __dmul_rn(a, b);
}

// Channel c's affine map y = x * scale + shift (the CPU's folding), in P, with every rounding
// pinned (no contraction left to the compiler): the apply kernel and the ReLU mask of the
// backward kernel compute y from the same x bit for bit.
template <class P>
struct ChannelAffine {
  P scale, shift;
  __device__ ChannelAffine(const P* mean, const P* invstd, const P* weight, const P* bias,
                           int64_t c)
      : scale(mul_rn(invstd[c], weight ? weight[c] : P(1))),
        shift(fma(-mean[c], scale, bias ? bias[c] : P(0))) {}
  __device__ P operator()(P x) const { return fma(x, scale, shift); }
};

template <class T, class P>
__global__ void batch_norm_apply_kernel(const T* __restrict__ x, const P* __restrict__ mean,
                                        const P* __restrict__ invstd, const P* __restrict__ weight,
                                        const P* __restrict__ bias, T* __restrict__ out,
                                        int64_t total, int64_t channels, int64_t s, bool relu) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const int64_t c = (i / s) % channels;
    // In P: f32 for 16-bit x, as the CPU computes it.
    P y = ChannelAffine<P>(mean, invstd, weight, bias, c)(device_convert<P>(x[i]));
    if (relu && y < P(0)) y = P(0);  // NaN passes, as relu
    out[i] = device_convert<T>(y);
  }
}

// One block per channel: the two sums over N and S, then (when grad_x is wanted) each element's
// gradient from them. Everything per element runs in double, as the statistics.
template <class T, class P>
__global__ void batch_norm_backward_kernel(const T* __restrict__ x, const T* __restrict__ grad,
                                           const P* __restrict__ mean, const P* __restrict__ invstd,
                                           const P* __restrict__ weight, bool training,
                                           T* __restrict__ grad_x, P* __restrict__ sum_g,
                                           P* __restrict__ sum_g_xhat, int64_t n, int64_t channels,
                                           int64_t s, ChannelWalk walk, bool relu,
                                           const P* __restrict__ bias) {
  __shared__ RowReduceSmem<double> shared;
  const int64_t c = blockIdx.x;
  const int tx = threadIdx.x % walk.width, ty = threadIdx.x / walk.width;
  const double mu = static_cast<double>(mean[c]), rstd = static_cast<double>(invstd[c]);
  const double count = static_cast<double>(n * s);
  const bool need_sums = training || sum_g || sum_g_xhat;
  // With relu, the gradient reaches batch norm's output only where the forward's output, y
  // rounded to T as it was stored, is positive: a 16-bit y too small for T stored 0.
  const ChannelAffine<P> affine(mean, invstd, weight, bias, c);
  auto stored = [&](int64_t k) {
    return device_convert<P>(device_convert<T>(affine(device_convert<P>(x[k]))));
  };
  auto gradient = [&](int64_t k) {
    if (relu && stored(k) <= P(0)) return 0.0;  // as the CPU: NaN passes
    return device_convert<double>(grad[k]);
  };
  double sg = 0.0, sgx = 0.0;
  if (need_sums) {
    for (int64_t i = ty; i < n; i += walk.rows) {
      const int64_t base = (i * channels + c) * s;
      for (int64_t j = tx; j < s; j += walk.width) {
        const double g = gradient(base + j);
        sg += g;
        sgx += g * ((device_convert<double>(x[base + j]) - mu) * rstd);
      }
    }
    sg = block_sum(sg, shared);
    sgx = block_sum(sgx, shared);
    if (threadIdx.x == 0) {
      if (sum_g) sum_g[c] = static_cast<P>(sg);
      if (sum_g_xhat) sum_g_xhat[c] = static_cast<P>(sgx);
    }
  }
  if (!grad_x) return;
  const double scale = rstd * (weight ? static_cast<double>(weight[c]) : 1.0);
  for (int64_t i = ty; i < n; i += walk.rows) {
    const int64_t base = (i * channels + c) * s;
    for (int64_t j = tx; j < s; j += walk.width) {
      const double g = gradient(base + j);
      double dx;
      if (training) {
        // The batch mean and variance depend on every x, so each gradient loses its projection
        // on 1 and on x_hat.
        const double x_hat = (device_convert<double>(x[base + j]) - mu) * rstd;
        dx = scale / count * (count * g - sg - x_hat * sgx);
      } else {
        dx = g * scale;
      }
      grad_x[base + j] = device_convert<T>(dx);
    }
  }
}

// One warp per row; a row's sums are reduced with shuffles, so no block barrier is needed, and the
// butterfly leaves the same total in every lane.
template <class T>
__global__ void layer_norm_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                  const T* __restrict__ bias, double eps, T* __restrict__ out,
                                  T* __restrict__ mean, T* __restrict__ invstd, int64_t rows,
                                  int64_t k) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = blockDim.x / kWarpSize;
  const int64_t step = static_cast<int64_t>(gridDim.x) * warps;
  for (int64_t row = blockIdx.x * warps + threadIdx.x / kWarpSize; row < rows; row += step) {
    const T* src = x + row * k;
    double total = 0.0;
    for (int64_t j = lane; j < k; j += kWarpSize) total += static_cast<double>(src[j]);
    total = warp_allreduce(total, Sum{});
    const double mu = k > 0 ? total / static_cast<double>(k) : 0.0;
    double squares = 0.0;
    for (int64_t j = lane; j < k; j += kWarpSize) {
      const double d = static_cast<double>(src[j]) - mu;
      squares += d * d;
    }
    squares = warp_allreduce(squares, Sum{});
    const double var = k > 0 ? squares / static_cast<double>(k) : 0.0;
    const double rstd = 1.0 / sqrt(var + eps);
    if (lane == 0) {
      mean[row] = static_cast<T>(mu);
      invstd[row] = static_cast<T>(rstd);
    }
    T* dst = out + row * k;
    for (int64_t j = lane; j < k; j += kWarpSize) {
      const T y = static_cast<T>((static_cast<double>(src[j]) - mu) * rstd);
      dst[j] = y * (weight ? weight[j] : T(1)) + (bias ? bias[j] : T(0));
    }
  }
}

}  // namespace

void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var) {
  const int64_t n = x.size(0), channels = x.size(1), s = x.size(2);
  if (channels == 0) return;
  visit_floating_device("batch_norm", x.dtype(), [&](auto t) {
    using T = typename decltype(t)::type;
    using P = device_acc_t<T>;  // f32 statistics for the 16-bit floats
    KILN_LAUNCH(static_cast<unsigned>(channels), kChannelThreads, 0, stream(),
                batch_norm_stats_kernel<T, P>)
    (data_as<T>(x), mean.data<P>(), var.data<P>(), n, channels, s, channel_walk(s));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& out, bool relu) {
  const int64_t total = x.numel();
  if (total == 0) return;
  visit_floating_device("batch_norm", x.dtype(), [&](auto t) {
    using T = typename decltype(t)::type;
    using P = device_acc_t<T>;  // f32 statistics for the 16-bit floats
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), batch_norm_apply_kernel<T, P>)
    (data_as<T>(x), mean.data<P>(), invstd.data<P>(), optional_data<P>(weight),
     optional_data<P>(bias), data_as<T>(out), total, x.size(1), x.size(2), relu);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, bool training,
                         const Tensor& grad_x, const Tensor& sum_g, const Tensor& sum_g_xhat,
                         bool relu, const Tensor& bias, DType out_dtype) {
  // The kernels take the activations in the output's own dtype (takes_half), so the mask rounds
  // y to x's dtype.
  if (out_dtype != x.dtype())
    throw Error(std::string("batch_norm_backward: internal error: the GPU kernel got ") +
                dtype_name(x.dtype()) + " activations for a " + dtype_name(out_dtype) + " output");
  const int64_t n = x.size(0), channels = x.size(1), s = x.size(2);
  if (channels == 0) return;
  visit_floating_device("batch_norm_backward", x.dtype(), [&](auto t) {
    using T = typename decltype(t)::type;
    using P = device_acc_t<T>;
    KILN_LAUNCH(static_cast<unsigned>(channels), kChannelThreads, 0, stream(),
                batch_norm_backward_kernel<T, P>)
    (data_as<T>(x), data_as<T>(grad), mean.data<P>(), invstd.data<P>(), optional_data<P>(weight),
     training, grad_x.defined() ? data_as<T>(grad_x) : nullptr, optional_out<P>(sum_g),
     optional_out<P>(sum_g_xhat), n, channels, s, channel_walk(s), relu, optional_data<P>(bias));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                const Tensor& out, const Tensor& mean, const Tensor& invstd) {
  const int64_t rows = x.size(0), k = x.size(1);
  if (rows == 0) return;
  visit_f32_f64("layer_norm", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(rows, kThreads / kWarpSize), kThreads, 0, stream(), layer_norm_kernel<T>)
    (x.data<T>(), optional_data<T>(weight), optional_data<T>(bias), eps, out.data<T>(),
     mean.data<T>(), invstd.data<T>(), rows, k);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr NormalizationKernels kCuda{.batch_norm_stats = cuda::batch_norm_stats,
                                     .batch_norm_apply = cuda::batch_norm_apply,
                                     .batch_norm_backward = cuda::batch_norm_backward,
                                     .layer_norm = cuda::layer_norm,
                                     .fuses_relu = true,
                                     .takes_half = true};
}  // namespace

const NormalizationKernels* const NormalizationKernels::cuda = &kCuda;

}  // namespace kiln
