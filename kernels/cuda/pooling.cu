// 2-D max, average and adaptive average pooling over [N, C, H, W], forward and backward, in f32
// and f64, each following the CPU's walk (kernels/cpu/pooling.cpp) so that ties, NaNs and sums
// come out the same. Every tensor is dense, NCHW or channels-last (NHWC), each read through its
// own strides (Dense4), and the threads walk the tensor they write in its memory order, so
// neighbouring threads touch neighbouring elements in either layout. One thread per element
// (grid-stride, kThreads a block):
//
//   forwards: a thread per output element walks its window; sums are taken in double.
//   max_pool2d_backward: a thread per output element adds its gradient to the input element its
//     index names, with an atomic add: with overlapping windows several may name one element, and
//     the order of their additions, so the rounding, can change from run to run.
//   avg_pool2d_backward, adaptive_avg_pool2d_backward: a thread per input element gathers the
//     shares of the windows that cover it, in the order the CPU scatters them: no atomics, the
//     CPU's rounding, and the same bits on every run.
#include <cmath>
#include <cstdint>

#include "kiln/core/cuda_check.h"
#include "kiln/kernels/cuda/launch.h"
#include "kiln/kernels/pooling.h"

namespace kiln::cuda {

namespace {

__host__ __device__ inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
__host__ __device__ inline int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}
__device__ inline int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// The CPU's AvgSpan (kernels/cpu/pooling.cpp): the window clipped to the input, and its length
// clipped only to the padded input.
struct AvgSpan {
  int64_t begin, end, padded_length;
};

__device__ inline AvgSpan avg_span(int64_t o, int64_t stride, int64_t pad, int64_t kernel,
                                   int64_t in) {
  const int64_t begin = o * stride - pad;
  const int64_t end = min64(begin + kernel, in + pad);
  return {max64(begin, 0), min64(end, in), end - begin};
}

__device__ inline int64_t avg_divisor(const AvgSpan& h, const AvgSpan& w, bool count_include_pad) {
  if (count_include_pad) return h.padded_length * w.padded_length;
  return (h.end - h.begin) * (w.end - w.begin);
}

__device__ inline int64_t adaptive_begin(int64_t o, int64_t out, int64_t in) {
  return (o * in) / out;
}
__device__ inline int64_t adaptive_end(int64_t o, int64_t out, int64_t in) {
  return ((o + 1) * in + out - 1) / out;
}

// Element (n, c, h, w) of a dense [N, C, H, W] tensor.
struct Coord {
  int64_t n, c, h, w;
};

// A dense [N, C, H, W] tensor's sizes and strides, and the order its memory runs in.
struct Dense4 {
  int64_t c, h, w;
  int64_t sn, sc, sh, sw;
  bool channels_last;  // C fastest (NHWC), else W fastest (NCHW)

  // The i-th element in memory order.
  __device__ Coord at(int64_t i) const {
    if (channels_last) return {i / (c * w * h), i % c, (i / (c * w)) % h, (i / c) % w};
    return {i / (w * h * c), (i / (w * h)) % c, (i / w) % h, i % w};
  }
  __device__ int64_t plane(const Coord& p) const { return p.n * sn + p.c * sc; }
  __device__ int64_t offset(const Coord& p) const { return plane(p) + p.h * sh + p.w * sw; }
  __device__ int64_t offset(const Coord& p, int64_t h_at, int64_t w_at) const {
    return plane(p) + h_at * sh + w_at * sw;
  }
};

Dense4 dense4(const Tensor& t) {
  return {t.size(1),   t.size(2),   t.size(3),   t.stride(0),
          t.stride(1), t.stride(2), t.stride(3), !t.is_contiguous()};
}

template <class T>
__global__ void max_pool2d_kernel(const T* __restrict__ x, T* __restrict__ out,
                                  int64_t* __restrict__ indices, int64_t total, Pool2dGeometry g,
                                  Dense4 xl, Dense4 ol) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const Coord o = ol.at(i);
    const int64_t oh = o.h, ow = o.w;
    const T* src = x + xl.plane(o);
    // The CPU's window walk, so ties and NaNs pick the same element: the first of equal maxima,
    // the last NaN.
    int64_t h0 = oh * g.stride_h - g.pad_h;
    const int64_t h1 = min64(h0 + (g.kernel_h - 1) * g.dilation_h + 1, g.in_h);
    while (h0 < 0) h0 += g.dilation_h;
    int64_t w0 = ow * g.stride_w - g.pad_w;
    const int64_t w1 = min64(w0 + (g.kernel_w - 1) * g.dilation_w + 1, g.in_w);
    while (w0 < 0) w0 += g.dilation_w;
    int64_t best_index = h0 * g.in_w + w0;
    T best = static_cast<T>(-INFINITY);
    for (int64_t ih = h0; ih < h1; ih += g.dilation_h) {
      for (int64_t iw = w0; iw < w1; iw += g.dilation_w) {
        const T v = src[ih * xl.sh + iw * xl.sw];
        if (v > best || isnan(v)) {
          best = v;
          best_index = ih * g.in_w + iw;
        }
      }
    }
    out[ol.offset(o)] = best;
    indices[ol.offset(o)] = best_index;  // indices share out's layout
  }
}

// grad_output and indices share a layout (gol); the index is the position in the input's plane.
template <class T>
__global__ void max_pool2d_backward_kernel(const T* __restrict__ grad_output,
                                           const int64_t* __restrict__ indices,
                                           T* __restrict__ grad_input, int64_t total, Dense4 gol,
                                           Dense4 gil) {
  const int64_t in_plane = gil.h * gil.w;
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const Coord o = gol.at(i);
    const int64_t index = indices[gol.offset(o)];
    // Indices outside the plane come from windows that held no input; they pass nothing back.
    if (index >= 0 && index < in_plane)
      atomicAdd(grad_input + gil.offset(o, index / gil.w, index % gil.w),
                grad_output[gol.offset(o)]);
  }
}

template <class T>
__global__ void avg_pool2d_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t total,
                                  Pool2dGeometry g, bool count_include_pad, Dense4 xl, Dense4 ol) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const Coord o = ol.at(i);
    const AvgSpan h = avg_span(o.h, g.stride_h, g.pad_h, g.kernel_h, g.in_h);
    const AvgSpan w = avg_span(o.w, g.stride_w, g.pad_w, g.kernel_w, g.in_w);
    if (h.begin >= h.end || w.begin >= w.end) {
      out[ol.offset(o)] = T(0);
      continue;
    }
    const T* src = x + xl.plane(o);
    double sum = 0.0;
    for (int64_t ih = h.begin; ih < h.end; ++ih)
      for (int64_t iw = w.begin; iw < w.end; ++iw)
        sum += static_cast<double>(src[ih * xl.sh + iw * xl.sw]);
    out[ol.offset(o)] =
        static_cast<T>(sum / static_cast<double>(avg_divisor(h, w, count_include_pad)));
  }
}

// One thread per input element gathers the shares of the windows that cover it, in the order
// the CPU scatters them (output rows, then columns), so the sums round the same way. Launched with
// kThreads a block: at 66 registers a thread (f64, sm_90) a block of 1024 would not launch
// (scripts/check-kernel-resources.py reads the bound).
template <class T>
__global__ void __launch_bounds__(kThreads)
    avg_pool2d_backward_kernel(const T* __restrict__ grad_output, T* __restrict__ grad_input,
                               int64_t total, Pool2dGeometry g, bool count_include_pad, Dense4 gol,
                               Dense4 gil) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const Coord in = gil.at(i);
    const int64_t iw = in.w, ih = in.h;
    // Window o starts at o * stride - pad and spans kernel: a superset of the windows holding
    // (ih, iw); each candidate is tested against its clipped span.
    const int64_t oh_lo = max64(floor_div(ih + g.pad_h - g.kernel_h, g.stride_h), 0);
    const int64_t oh_hi = min64((ih + g.pad_h) / g.stride_h, g.out_h - 1);
    const int64_t ow_lo = max64(floor_div(iw + g.pad_w - g.kernel_w, g.stride_w), 0);
    const int64_t ow_hi = min64((iw + g.pad_w) / g.stride_w, g.out_w - 1);
    const T* go = grad_output + gol.plane(in);
    T acc = grad_input[gil.offset(in)];
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      const AvgSpan h = avg_span(oh, g.stride_h, g.pad_h, g.kernel_h, g.in_h);
      if (ih < h.begin || ih >= h.end) continue;
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        const AvgSpan w = avg_span(ow, g.stride_w, g.pad_w, g.kernel_w, g.in_w);
        if (iw < w.begin || iw >= w.end) continue;
        acc += go[oh * gol.sh + ow * gol.sw] / static_cast<T>(avg_divisor(h, w, count_include_pad));
      }
    }
    grad_input[gil.offset(in)] = acc;
  }
}

template <class T>
__global__ void adaptive_avg_pool2d_kernel(const T* __restrict__ x, T* __restrict__ out,
                                           int64_t total, Dense4 xl, Dense4 ol) {
  const int64_t in_h = xl.h, in_w = xl.w, out_h = ol.h, out_w = ol.w;
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const Coord o = ol.at(i);
    const int64_t h0 = adaptive_begin(o.h, out_h, in_h), h1 = adaptive_end(o.h, out_h, in_h);
    const int64_t w0 = adaptive_begin(o.w, out_w, in_w), w1 = adaptive_end(o.w, out_w, in_w);
    const T* src = x + xl.plane(o);
    double sum = 0.0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) sum += static_cast<double>(src[ih * xl.sh + iw * xl.sw]);
    out[ol.offset(o)] = static_cast<T>(sum / static_cast<double>((h1 - h0) * (w1 - w0)));
  }
}

// Cell o covers [floor(o * in / out), ceil((o + 1) * in / out)), so the cells covering input i
// lie in [floor(i * out / in), ceil((i + 1) * out / in)); each is tested exactly. kThreads a block,
// as avg_pool2d_backward_kernel (84 and 87 registers on sm_90).
template <class T>
__global__ void __launch_bounds__(kThreads)
    adaptive_avg_pool2d_backward_kernel(const T* __restrict__ grad_output,
                                        T* __restrict__ grad_input, int64_t total, Dense4 gol,
                                        Dense4 gil) {
  const int64_t in_h = gil.h, in_w = gil.w, out_h = gol.h, out_w = gol.w;
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const Coord in = gil.at(i);
    const int64_t iw = in.w, ih = in.h;
    const int64_t oh_lo = (ih * out_h) / in_h;
    const int64_t oh_hi = min64(((ih + 1) * out_h + in_h - 1) / in_h, out_h);
    const int64_t ow_lo = (iw * out_w) / in_w;
    const int64_t ow_hi = min64(((iw + 1) * out_w + in_w - 1) / in_w, out_w);
    const T* go = grad_output + gol.plane(in);
    T acc = grad_input[gil.offset(in)];
    for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
      const int64_t h0 = adaptive_begin(oh, out_h, in_h), h1 = adaptive_end(oh, out_h, in_h);
      if (ih < h0 || ih >= h1) continue;
      for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
        const int64_t w0 = adaptive_begin(ow, out_w, in_w), w1 = adaptive_end(ow, out_w, in_w);
        if (iw < w0 || iw >= w1) continue;
        acc += go[oh * gol.sh + ow * gol.sw] / static_cast<T>((h1 - h0) * (w1 - w0));
      }
    }
    grad_input[gil.offset(in)] = acc;
  }
}

}  // namespace

void max_pool2d(const Tensor& x, const Tensor& out, const Tensor& indices,
                const Pool2dGeometry& g) {
  const int64_t total = out.numel();
  if (total == 0) return;
  visit_f32_f64("max_pool2d", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), max_pool2d_kernel<T>)
    (x.data<T>(), out.data<T>(), indices.data<int64_t>(), total, g, dense4(x), dense4(out));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                         const Tensor& grad_input) {
  const int64_t total = grad_output.numel();
  if (total == 0) return;
  visit_f32_f64("max_pool2d_backward", grad_output.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), max_pool2d_backward_kernel<T>)
    (grad_output.data<T>(), indices.data<int64_t>(), grad_input.data<T>(), total,
     dense4(grad_output), dense4(grad_input));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void avg_pool2d(const Tensor& x, const Tensor& out, const Pool2dGeometry& g,
                bool count_include_pad) {
  const int64_t total = out.numel();
  if (total == 0) return;
  visit_f32_f64("avg_pool2d", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), avg_pool2d_kernel<T>)
    (x.data<T>(), out.data<T>(), total, g, count_include_pad, dense4(x), dense4(out));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void avg_pool2d_backward(const Tensor& grad_output, const Tensor& grad_input,
                         const Pool2dGeometry& g, bool count_include_pad) {
  const int64_t total = grad_input.numel();
  if (total == 0 || grad_output.numel() == 0) return;
  visit_f32_f64("avg_pool2d_backward", grad_output.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), avg_pool2d_backward_kernel<T>)
    (grad_output.data<T>(), grad_input.data<T>(), total, g, count_include_pad, dense4(grad_output),
     dense4(grad_input));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void adaptive_avg_pool2d(const Tensor& x, const Tensor& out) {
  const int64_t total = out.numel();
  if (total == 0) return;
  visit_f32_f64("adaptive_avg_pool2d", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), adaptive_avg_pool2d_kernel<T>)
    (x.data<T>(), out.data<T>(), total, dense4(x), dense4(out));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void adaptive_avg_pool2d_backward(const Tensor& grad_output, const Tensor& grad_input) {
  const int64_t total = grad_input.numel();
  if (total == 0 || grad_output.numel() == 0) return;
  visit_f32_f64("adaptive_avg_pool2d_backward", grad_output.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream(), adaptive_avg_pool2d_backward_kernel<T>)
    (grad_output.data<T>(), grad_input.data<T>(), total, dense4(grad_output), dense4(grad_input));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda

namespace kiln {

namespace {
constexpr PoolingKernels kCuda{.max_pool2d = cuda::max_pool2d,
                               .max_pool2d_backward = cuda::max_pool2d_backward,
                               .avg_pool2d = cuda::avg_pool2d,
                               .avg_pool2d_backward = cuda::avg_pool2d_backward,
                               .adaptive_avg_pool2d = cuda::adaptive_avg_pool2d,
                               .adaptive_avg_pool2d_backward = cuda::adaptive_avg_pool2d_backward,
                               .takes_channels_last = true,
                               .max_pool_takes_bf16 = false};
}  // namespace

const PoolingKernels* const PoolingKernels::cuda = &kCuda;

}  // namespace kiln
