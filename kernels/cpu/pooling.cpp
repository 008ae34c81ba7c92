#include "kiln/kernels/pooling.h"

#include <algorithm>
#include <cstdint>

#include "kiln/kernels/cpu/loops.h"
#include "kiln/kernels/cpu/max_pool.h"

namespace kiln::cpu {

namespace {

int64_t planes_of(const Tensor& t) {
  return t.size(0) * t.size(1);
}

// The window of an avg-pool output cell along one axis, clipped to the input, and its divisor
// share: the clipped length, or the length clipped only to the padded input.
struct AvgSpan {
  int64_t begin, end, padded_length;
};

AvgSpan avg_span(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t in) {
  int64_t begin = o * stride - pad;
  int64_t end = std::min(begin + kernel, in + pad);
  int64_t padded_length = end - begin;
  return {std::max<int64_t>(begin, 0), std::min(end, in), padded_length};
}

int64_t avg_divisor(const AvgSpan& h, const AvgSpan& w, bool count_include_pad) {
  if (count_include_pad) return h.padded_length * w.padded_length;
  return (h.end - h.begin) * (w.end - w.begin);
}

int64_t adaptive_begin(int64_t o, int64_t out, int64_t in) {
  return (o * in) / out;
}
int64_t adaptive_end(int64_t o, int64_t out, int64_t in) {
  return ((o + 1) * in + out - 1) / out;
}

}  // namespace

void avg_pool2d(const Tensor& x, const Tensor& out, const Pool2dGeometry& g,
                bool count_include_pad) {
  visit_f32_f64("avg_pool2d", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
    parallel_for(
        planes_of(x), out_plane * g.kernel_h * g.kernel_w, [&](int64_t begin, int64_t end) {
          for (int64_t p = begin; p < end; ++p) {
            const T* src = in + p * in_plane;
            for (int64_t oh = 0; oh < g.out_h; ++oh) {
              AvgSpan h = avg_span(oh, g.stride_h, g.pad_h, g.kernel_h, g.in_h);
              for (int64_t ow = 0; ow < g.out_w; ++ow) {
                AvgSpan w = avg_span(ow, g.stride_w, g.pad_w, g.kernel_w, g.in_w);
                T& result = o[p * out_plane + oh * g.out_w + ow];
                if (h.begin >= h.end || w.begin >= w.end) {
                  result = T(0);
                  continue;
                }
                double total = 0.0;
                for (int64_t ih = h.begin; ih < h.end; ++ih)
                  for (int64_t iw = w.begin; iw < w.end; ++iw) total += src[ih * g.in_w + iw];
                result = static_cast<T>(total /
                                        static_cast<double>(avg_divisor(h, w, count_include_pad)));
              }
            }
          }
        });
  });
}

void avg_pool2d_backward(const Tensor& grad_output, const Tensor& grad_input,
                         const Pool2dGeometry& g, bool count_include_pad) {
  visit_f32_f64("avg_pool2d_backward", grad_output.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* go = grad_output.data<T>();
    T* gi = grad_input.data<T>();
    const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
    parallel_for(planes_of(grad_output), out_plane * g.kernel_h * g.kernel_w,
                 [&](int64_t begin, int64_t end) {
                   for (int64_t p = begin; p < end; ++p) {
                     T* dst = gi + p * in_plane;
                     for (int64_t oh = 0; oh < g.out_h; ++oh) {
                       AvgSpan h = avg_span(oh, g.stride_h, g.pad_h, g.kernel_h, g.in_h);
                       for (int64_t ow = 0; ow < g.out_w; ++ow) {
                         AvgSpan w = avg_span(ow, g.stride_w, g.pad_w, g.kernel_w, g.in_w);
                         if (h.begin >= h.end || w.begin >= w.end) continue;
                         T share = go[p * out_plane + oh * g.out_w + ow] /
                                   static_cast<T>(avg_divisor(h, w, count_include_pad));
                         for (int64_t ih = h.begin; ih < h.end; ++ih)
                           for (int64_t iw = w.begin; iw < w.end; ++iw)
                             dst[ih * g.in_w + iw] += share;
                       }
                     }
                   }
                 });
  });
}

void adaptive_avg_pool2d(const Tensor& x, const Tensor& out) {
  visit_f32_f64("adaptive_avg_pool2d", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const int64_t in_h = x.size(2), in_w = x.size(3), out_h = out.size(2), out_w = out.size(3);
    const int64_t in_plane = in_h * in_w, out_plane = out_h * out_w;
    parallel_for(
        planes_of(x), std::max<int64_t>(in_plane, out_plane), [&](int64_t begin, int64_t end) {
          for (int64_t p = begin; p < end; ++p) {
            const T* src = in + p * in_plane;
            for (int64_t oh = 0; oh < out_h; ++oh) {
              int64_t h0 = adaptive_begin(oh, out_h, in_h), h1 = adaptive_end(oh, out_h, in_h);
              for (int64_t ow = 0; ow < out_w; ++ow) {
                int64_t w0 = adaptive_begin(ow, out_w, in_w), w1 = adaptive_end(ow, out_w, in_w);
                double total = 0.0;
                for (int64_t ih = h0; ih < h1; ++ih)
                  for (int64_t iw = w0; iw < w1; ++iw) total += src[ih * in_w + iw];
                o[p * out_plane + oh * out_w + ow] =
                    static_cast<T>(total / static_cast<double>((h1 - h0) * (w1 - w0)));
              }
            }
          }
        });
  });
}

void adaptive_avg_pool2d_backward(const Tensor& grad_output, const Tensor& grad_input) {
  visit_f32_f64("adaptive_avg_pool2d_backward", grad_output.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* go = grad_output.data<T>();
    T* gi = grad_input.data<T>();
    const int64_t in_h = grad_input.size(2), in_w = grad_input.size(3);
    const int64_t out_h = grad_output.size(2), out_w = grad_output.size(3);
    const int64_t in_plane = in_h * in_w, out_plane = out_h * out_w;
    parallel_for(
        planes_of(grad_output), std::max<int64_t>(in_plane, out_plane),
        [&](int64_t begin, int64_t end) {
          for (int64_t p = begin; p < end; ++p) {
            T* dst = gi + p * in_plane;
            for (int64_t oh = 0; oh < out_h; ++oh) {
              int64_t h0 = adaptive_begin(oh, out_h, in_h), h1 = adaptive_end(oh, out_h, in_h);
              for (int64_t ow = 0; ow < out_w; ++ow) {
                int64_t w0 = adaptive_begin(ow, out_w, in_w), w1 = adaptive_end(ow, out_w, in_w);
                T share =
                    go[p * out_plane + oh * out_w + ow] / static_cast<T>((h1 - h0) * (w1 - w0));
                for (int64_t ih = h0; ih < h1; ++ih)
                  for (int64_t iw = w0; iw < w1; ++iw) dst[ih * in_w + iw] += share;
              }
            }
          }
        });
  });
}

}  // namespace kiln::cpu

namespace kiln {

const PoolingKernels PoolingKernels::cpu{
    .max_pool2d = cpu::max_pool2d,
    .max_pool2d_backward = cpu::max_pool2d_backward,
    .avg_pool2d = cpu::avg_pool2d,
    .avg_pool2d_backward = cpu::avg_pool2d_backward,
    .adaptive_avg_pool2d = cpu::adaptive_avg_pool2d,
    .adaptive_avg_pool2d_backward = cpu::adaptive_avg_pool2d_backward,
    .takes_channels_last = false,
    .max_pool_takes_bf16 = true};

}  // namespace kiln
