#include "kiln/kernels/cpu/conv2d.h"

#include <algorithm>
#include <vector>

#include "kiln/kernels/cpu/loops.h"
#include "kiln/kernels/cpu/matmul.h"

namespace kiln::cpu {

namespace {

// The matrix sizes every image's product shares.
struct GemmSizes {
  int64_t channels;   // C / groups
  int64_t outputs;    // O / groups
  int64_t col_rows;   // C / groups * kH * kW
  int64_t positions;  // OH * OW
  bool pointwise;     // a 1x1 kernel, stride 1, no padding: the image is its own column matrix
};

GemmSizes gemm_sizes(const Conv2dGeometry& g) {
  GemmSizes s;
  s.channels = g.in_channels / g.groups;
  s.outputs = g.out_channels / g.groups;
  s.col_rows = s.channels * g.kernel_h * g.kernel_w;
  s.positions = g.out_h * g.out_w;
  s.pointwise = g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1 &&
                g.pad_h == 0 && g.pad_w == 0;
  return s;
}

// The outputs o in [begin, end) whose input position o * stride + offset lies inside [0, size).
struct ValidRange {
  int64_t begin, end;
};

ValidRange valid_outputs(int64_t offset, int64_t stride, int64_t size, int64_t outputs) {
  int64_t begin = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t end = size - 1 - offset < 0 ? 0 : (size - 1 - offset) / stride + 1;
  begin = std::min(begin, outputs);
  end = std::clamp(end, begin, outputs);
  return {begin, end};
}

// Calls fn(col_row, in_row, range) for every row of the column matrix and output row oh, where
// in_row points at input element (ih, range-begin's iw) or is null when ih is padding; the
// input column of output ow is in_row[(ow - range.begin) * stride_w]. im2col and col2im share it
// so their index arithmetic cannot drift apart.
template <class T, class F>
void for_each_col_row(const Conv2dGeometry& g, const GemmSizes& s, T* image, F&& fn) {
  for (int64_t c = 0; c < s.channels; ++c) {
    T* plane = image + c * g.in_h * g.in_w;
    for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
      for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
        const int64_t row = (c * g.kernel_h + ki) * g.kernel_w + kj;
        const int64_t w_offset = kj * g.dilation_w - g.pad_w;
        const ValidRange cols = valid_outputs(w_offset, g.stride_w, g.in_w, g.out_w);
        for (int64_t oh = 0; oh < g.out_h; ++oh) {
          const int64_t ih = oh * g.stride_h - g.pad_h + ki * g.dilation_h;
          T* in_row = ih >= 0 && ih < g.in_h && cols.begin < cols.end
                          ? plane + ih * g.in_w + cols.begin * g.stride_w + w_offset
                          : nullptr;
          fn(row * s.positions + oh * g.out_w, in_row, cols);
        }
      }
    }
  }
}

template <class T>
void im2col(const Conv2dGeometry& g, const GemmSizes& s, const T* image, T* col) {
  for_each_col_row(g, s, image, [&](int64_t at, const T* in, ValidRange cols) {
    T* out = col + at;
    if (!in) {
      std::fill(out, out + g.out_w, T(0));
      return;
    }
    std::fill(out, out + cols.begin, T(0));
    const int64_t stride = g.stride_w;
    for (int64_t ow = cols.begin; ow < cols.end; ++ow) out[ow] = in[(ow - cols.begin) * stride];
    std::fill(out + cols.end, out + g.out_w, T(0));
  });
}

// Adds each column entry back onto the input element it was copied from; image starts zeroed.
template <class T>
void col2im(const Conv2dGeometry& g, const GemmSizes& s, const T* col, T* image) {
  for_each_col_row(g, s, image, [&](int64_t at, T* in, ValidRange cols) {
    if (!in) return;
    const T* from = col + at;
    const int64_t stride = g.stride_w;
    for (int64_t ow = cols.begin; ow < cols.end; ++ow) in[(ow - cols.begin) * stride] += from[ow];
  });
}

// Splits the images across threads when there are several; with one image Eigen threads the GEMM.
template <class F>
void for_image_chunks(const Conv2dGeometry& g, F&& fn) {
  const int64_t flops_per_image =
      g.out_channels * (g.in_channels / g.groups) * g.kernel_h * g.kernel_w * g.out_h * g.out_w;
  parallel_for(g.batch, std::max<int64_t>(flops_per_image, 1), fn);
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const Conv2dGeometry& g) {
  const GemmSizes s = gemm_sizes(g);
  visit_f32_f64("conv2d", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* pw = weight.data<T>();
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    T* po = out.data<T>();
    for_image_chunks(g, [&](int64_t begin, int64_t end) {
      std::vector<T> col(s.pointwise ? 0 : s.col_rows * s.positions);
      for (int64_t n = begin; n < end; ++n) {
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          const T* image = px + (n * g.in_channels + grp * s.channels) * g.in_h * g.in_w;
          T* dst = po + (n * g.out_channels + grp * s.outputs) * s.positions;
          if (pb) {
            for (int64_t o = 0; o < s.outputs; ++o)
              std::fill(dst + o * s.positions, dst + (o + 1) * s.positions,
                        pb[grp * s.outputs + o]);
          }
          const T* cols = image;
          if (!s.pointwise) {
            im2col(g, s, image, col.data());
            cols = col.data();
          }
          gemm<T>(false, false, s.outputs, s.positions, s.col_rows,
                  pw + grp * s.outputs * s.col_rows, s.col_rows, cols, s.positions, dst,
                  s.positions, pb != nullptr);
        }
      }
    });
  });
}

void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                           const Conv2dGeometry& g) {
  const GemmSizes s = gemm_sizes(g);
  visit_f32_f64("conv2d_backward_input", grad_out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pg = grad_out.data<T>();
    const T* pw = weight.data<T>();
    T* px = grad_x.data<T>();
    for_image_chunks(g, [&](int64_t begin, int64_t end) {
      std::vector<T> col(s.pointwise ? 0 : s.col_rows * s.positions);
      for (int64_t n = begin; n < end; ++n) {
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          T* image = px + (n * g.in_channels + grp * s.channels) * g.in_h * g.in_w;
          const T* grad = pg + (n * g.out_channels + grp * s.outputs) * s.positions;
          // weightᵀ · grad: the weight block is stored [O/groups, col_rows], read transposed.
          T* cols = s.pointwise ? image : col.data();
          gemm<T>(true, false, s.col_rows, s.positions, s.outputs,
                  pw + grp * s.outputs * s.col_rows, s.col_rows, grad, s.positions, cols,
                  s.positions, false);
          if (!s.pointwise) {
            std::fill(image, image + s.channels * g.in_h * g.in_w, T(0));
            col2im(g, s, col.data(), image);
          }
        }
      }
    });
  });
}

void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                            const Conv2dGeometry& g) {
  const GemmSizes s = gemm_sizes(g);
  visit_f32_f64("conv2d_backward_weight", grad_out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pg = grad_out.data<T>();
    const T* px = x.data<T>();
    T* pw = grad_weight.data<T>();
    const int64_t weight_numel = g.out_channels * s.col_rows;
    std::fill(pw, pw + weight_numel, T(0));
    for_image_chunks(g, [&](int64_t begin, int64_t end) {
      // Each thread sums its images into its own copy, so the shared gradient is written once
      // per thread rather than raced on per image.
      const bool alone = begin == 0 && end == g.batch;
      std::vector<T> partial(alone ? 0 : weight_numel, T(0));
      T* acc = alone ? pw : partial.data();
      std::vector<T> col(s.pointwise ? 0 : s.col_rows * s.positions);
      for (int64_t n = begin; n < end; ++n) {
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          const T* image = px + (n * g.in_channels + grp * s.channels) * g.in_h * g.in_w;
          const T* grad = pg + (n * g.out_channels + grp * s.outputs) * s.positions;
          const T* cols = image;
          if (!s.pointwise) {
            im2col(g, s, image, col.data());
            cols = col.data();
          }
          // grad · colᵀ: col is stored [col_rows, positions], read transposed.
          gemm<T>(false, true, s.outputs, s.col_rows, s.positions, grad, s.positions, cols,
                  s.positions, acc + grp * s.outputs * s.col_rows, s.col_rows, true);
        }
      }
      if (!alone) {
#pragma omp critical(kiln_conv2d_backward_weight)
        for (int64_t i = 0; i < weight_numel; ++i) pw[i] += partial[i];
      }
    });
  });
}

}  // namespace kiln::cpu
