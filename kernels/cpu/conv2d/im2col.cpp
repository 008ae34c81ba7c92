// im2col + GEMM: each image unfolded into a column matrix and multiplied by the weights with
// Eigen's GEMM (kernels/cpu/gemm.h). The only kernels for f64; one candidate among several for f32
// (kernels/cpu/conv2d/choice.cpp).
#include "kiln/kernels/cpu/conv2d/im2col.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/kernels/conv2d.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/loops.h"

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

// Calls fn(at, in_row, range) for every row of the column matrix and output row oh, where `at` is
// the element (row, oh * OW) of a column matrix whose rows are `ld` apart, and in_row points at
// input element (ih, range-begin's iw) or is null when ih is padding; the input column of output ow
// is in_row[(ow - range.begin) * stride_w]. im2col and col2im share it so their index arithmetic
// cannot drift apart.
template <class T, class F>
void for_each_col_row(const Conv2dGeometry& g, const GemmSizes& s, T* image, int64_t ld, F&& fn) {
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
          fn(row * ld + oh * g.out_w, in_row, cols);
        }
      }
    }
  }
}

// Stride-1 convolutions whose output rows are as wide as the input's (3x3 with padding 1, most of
// a ResNet): a kernel tap's row of the column matrix is the input plane read at one fixed shift,
// so it moves as one long run rather than one short run per output row.
bool shifts_planes(const Conv2dGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.out_w == g.in_w;
}

// For tap (ki, kj) of such a convolution: output positions [begin, end) read input position
// + shift and are all inside the plane; within the run, the columns outside `cols` of each row
// wrapped around from the neighbouring row and stand for padding.
struct TapRun {
  int64_t begin = 0, end = 0, shift = 0;
  ValidRange rows{0, 0}, cols{0, 0};
};

TapRun tap_run(const Conv2dGeometry& g, int64_t ki, int64_t kj) {
  const int64_t h_offset = ki * g.dilation_h - g.pad_h, w_offset = kj * g.dilation_w - g.pad_w;
  TapRun r;
  r.shift = h_offset * g.in_w + w_offset;
  r.rows = valid_outputs(h_offset, 1, g.in_h, g.out_h);
  r.cols = valid_outputs(w_offset, 1, g.in_w, g.out_w);
  if (r.rows.begin < r.rows.end && r.cols.begin < r.cols.end) {
    r.begin = r.rows.begin * g.out_w + r.cols.begin;
    r.end = (r.rows.end - 1) * g.out_w + r.cols.end;
  }
  return r;
}

// Zeroes the wrapped-around entries of a tap's run.
template <class T>
void zero_wrapped(const Conv2dGeometry& g, const TapRun& r, T* row) {
  if (r.cols.begin == 0 && r.cols.end == g.out_w) return;
  // A padding of p leaves p entries per row: loops this short beat calls to fill.
  for (int64_t oh = r.rows.begin; oh < r.rows.end; ++oh) {
    T* line = row + oh * g.out_w;
    for (int64_t ow = 0; ow < r.cols.begin; ++ow) line[ow] = T(0);
    for (int64_t ow = r.cols.end; ow < g.out_w; ++ow) line[ow] = T(0);
  }
}

// Unfolds one image into its block of columns of a column matrix with rows `ld` apart.
template <class T>
void im2col(const Conv2dGeometry& g, const GemmSizes& s, const T* image, T* col, int64_t ld) {
  if (shifts_planes(g)) {
    for (int64_t c = 0; c < s.channels; ++c) {
      const T* plane = image + c * g.in_h * g.in_w;
      for (int64_t ki = 0; ki < g.kernel_h; ++ki)
        for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
          T* out = col + ((c * g.kernel_h + ki) * g.kernel_w + kj) * ld;
          const TapRun r = tap_run(g, ki, kj);
          std::fill(out, out + r.begin, T(0));
          std::copy(plane + r.begin + r.shift, plane + r.end + r.shift, out + r.begin);
          std::fill(out + r.end, out + s.positions, T(0));
          zero_wrapped(g, r, out);
        }
    }
    return;
  }
  for_each_col_row(g, s, image, ld, [&](int64_t at, const T* in, ValidRange cols) {
    T* out = col + at;
    if (!in) {
      std::fill(out, out + g.out_w, T(0));
      return;
    }
    std::fill(out, out + cols.begin, T(0));
    for (int64_t ow = cols.begin; ow < cols.end; ++ow) out[ow] = in[(ow - cols.begin) * g.stride_w];
    std::fill(out + cols.end, out + g.out_w, T(0));
  });
}

// Adds each column entry back onto the input element it was copied from; image starts zeroed.
// col is scratch: the plane-shifting path zeroes its padding entries so a run adds as one loop.
template <class T>
void col2im(const Conv2dGeometry& g, const GemmSizes& s, T* col, int64_t ld, T* image) {
  if (shifts_planes(g)) {
    for (int64_t c = 0; c < s.channels; ++c) {
      T* plane = image + c * g.in_h * g.in_w;
      for (int64_t ki = 0; ki < g.kernel_h; ++ki)
        for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
          T* row = col + ((c * g.kernel_h + ki) * g.kernel_w + kj) * ld;
          const TapRun r = tap_run(g, ki, kj);
          zero_wrapped(g, r, row);
          const T* from = row + r.begin;
          T* to = plane + r.begin + r.shift;
#pragma omp simd
          for (int64_t i = 0; i < r.end - r.begin; ++i) to[i] += from[i];
        }
    }
    return;
  }
  for_each_col_row(g, s, image, ld, [&](int64_t at, T* in, ValidRange cols) {
    if (!in) return;
    const T* from = col + at + cols.begin;
    for (int64_t i = 0; i < cols.end - cols.begin; ++i) in[i * g.stride_w] += from[i];
  });
}

// Uninitialised working memory: every element is written before it is read, so zeroing it (as
// std::vector would, on every call) is a wasted pass over up to half a megabyte. `new T[n]` without
// braces leaves it uninitialised, as make_unique_for_overwrite would (which libc++ 14 lacks).
template <class T>
std::unique_ptr<T[]> scratch(int64_t n) {
  return std::unique_ptr<T[]>(new T[static_cast<size_t>(n)]);
}

// Images per GEMM. One late-layer image makes a short product (7x7 = 49 positions), so images are
// put side by side until a chunk's column matrix holds about 128K values: half of a 1 MiB L2 cache
// in f32, long enough for Eigen's kernel to run at speed.
int64_t images_per_chunk(const GemmSizes& s) {
  if (s.pointwise) return 1;
  constexpr int64_t kColumnBudget = int64_t{1} << 17;
  return std::max<int64_t>(1, kColumnBudget / std::max<int64_t>(1, s.col_rows * s.positions));
}

// Splits the images across threads when there are several; with one image Eigen threads the GEMM.
// fn(begin, end, per) gets a thread's range and the chunk size to walk it with.
template <class F>
void for_image_chunks(const Conv2dGeometry& g, const GemmSizes& s, F&& fn) {
  const int64_t flops_per_image =
      g.out_channels * (g.in_channels / g.groups) * g.kernel_h * g.kernel_w * g.out_h * g.out_w;
  const int64_t per = images_per_chunk(s);
  parallel_for(g.batch, std::max<int64_t>(flops_per_image, 1),
               [&](int64_t begin, int64_t end) { fn(begin, end, std::min(per, end - begin)); });
}

// Copies group grp of images [n0, n0 + nb) of an [N, channels, positions] tensor side by side into
// a [group_channels, nb * positions] matrix, or back the other way.
template <class T>
void gather_images(const T* tensor, int64_t channels, int64_t group_channels, int64_t positions,
                   int64_t n0, int64_t nb, int64_t grp, T* matrix) {
  const int64_t ld = nb * positions;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t c = 0; c < group_channels; ++c) {
      const T* src = tensor + ((n0 + b) * channels + grp * group_channels + c) * positions;
      std::copy(src, src + positions, matrix + c * ld + b * positions);
    }
}

template <class T>
void scatter_images(const T* matrix, int64_t channels, int64_t group_channels, int64_t positions,
                    int64_t n0, int64_t nb, int64_t grp, T* tensor) {
  const int64_t ld = nb * positions;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t c = 0; c < group_channels; ++c) {
      const T* src = matrix + c * ld + b * positions;
      std::copy(src, src + positions,
                tensor + ((n0 + b) * channels + grp * group_channels + c) * positions);
    }
}

}  // namespace

void im2col_conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Tensor& out, const Conv2dGeometry& g) {
  const GemmSizes s = gemm_sizes(g);
  visit_f32_f64("conv2d", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* pw = weight.data<T>();
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    T* po = out.data<T>();
    const int64_t image_size = g.in_channels * g.in_h * g.in_w;
    for_image_chunks(g, s, [&](int64_t begin, int64_t end, int64_t per) {
      auto col = scratch<T>(s.pointwise ? 0 : s.col_rows * s.positions * per);
      auto product = scratch<T>(per > 1 ? s.outputs * s.positions * per : 0);
      for (int64_t n0 = begin; n0 < end; n0 += per) {
        const int64_t nb = std::min(per, end - n0), ld = nb * s.positions;
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          const T* cols = px + n0 * image_size + grp * s.channels * g.in_h * g.in_w;
          if (!s.pointwise) {
            for (int64_t b = 0; b < nb; ++b)
              im2col(g, s, px + (n0 + b) * image_size + grp * s.channels * g.in_h * g.in_w,
                     col.get() + b * s.positions, ld);
            cols = col.get();
          }
          const T* w = pw + grp * s.outputs * s.col_rows;
          // One image writes its product straight into the output; a chunk goes through a
          // staging matrix whose blocks are then copied to their images.
          T* dst =
              nb == 1 ? po + (n0 * g.out_channels + grp * s.outputs) * s.positions : product.get();
          if (pb) {
            for (int64_t o = 0; o < s.outputs; ++o)
              std::fill(dst + o * ld, dst + (o + 1) * ld, pb[grp * s.outputs + o]);
          }
          gemm<T>(false, false, s.outputs, ld, s.col_rows, w, s.col_rows, cols, ld, dst, ld,
                  pb != nullptr);
          if (nb > 1)
            scatter_images(product.get(), g.out_channels, s.outputs, s.positions, n0, nb, grp, po);
        }
      }
    });
  });
}

namespace {

// A stride-1 convolution's input gradient is itself a stride-1 convolution: grad_out correlated
// with the kernel flipped in both axes and with its channel dims swapped, padded by
// dilation * (k - 1) - pad. That form unfolds grad_out with im2col and runs a GEMM whose inner
// dimension is O * kH * kW, where the general form's GEMM sums over only O and then scatter-adds
// its columns back with col2im.
bool backward_input_as_forward(const Conv2dGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.pad_h <= g.dilation_h * (g.kernel_h - 1) &&
         g.pad_w <= g.dilation_w * (g.kernel_w - 1);
}

void conv2d_backward_input_as_forward(const Tensor& grad_out, const Tensor& weight,
                                      const Tensor& grad_x, const Conv2dGeometry& g) {
  Conv2dGeometry t = g;
  t.in_channels = g.out_channels, t.out_channels = g.in_channels;
  t.in_h = g.out_h, t.in_w = g.out_w, t.out_h = g.in_h, t.out_w = g.in_w;
  t.pad_h = g.dilation_h * (g.kernel_h - 1) - g.pad_h;
  t.pad_w = g.dilation_w * (g.kernel_w - 1) - g.pad_w;
  const int64_t og = g.out_channels / g.groups, cg = g.in_channels / g.groups;
  const int64_t kh = g.kernel_h, kw = g.kernel_w;
  Tensor flipped = empty({g.in_channels, og, kh, kw}, weight.dtype());
  visit_f32_f64("conv2d_backward_input", weight.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* w = weight.data<T>();
    T* f = flipped.data<T>();
    for (int64_t grp = 0; grp < g.groups; ++grp)
      for (int64_t o = 0; o < og; ++o)
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j)
              f[(((grp * cg + c) * og + o) * kh + i) * kw + j] =
                  w[(((grp * og + o) * cg + c) * kh + (kh - 1 - i)) * kw + (kw - 1 - j)];
  });
  im2col_conv2d_forward(grad_out, flipped, Tensor(), grad_x, t);
}

}  // namespace

void im2col_conv2d_backward_input(const Tensor& grad_out, const Tensor& weight,
                                  const Tensor& grad_x, const Conv2dGeometry& g) {
  if (backward_input_as_forward(g)) {
    conv2d_backward_input_as_forward(grad_out, weight, grad_x, g);
    return;
  }
  const GemmSizes s = gemm_sizes(g);
  visit_f32_f64("conv2d_backward_input", grad_out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pg = grad_out.data<T>();
    const T* pw = weight.data<T>();
    T* px = grad_x.data<T>();
    const int64_t image_size = g.in_channels * g.in_h * g.in_w;
    for_image_chunks(g, s, [&](int64_t begin, int64_t end, int64_t per) {
      auto col = scratch<T>(s.pointwise ? 0 : s.col_rows * s.positions * per);
      auto grads = scratch<T>(per > 1 ? s.outputs * s.positions * per : 0);
      for (int64_t n0 = begin; n0 < end; n0 += per) {
        const int64_t nb = std::min(per, end - n0), ld = nb * s.positions;
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          T* image = px + n0 * image_size + grp * s.channels * g.in_h * g.in_w;
          const T* grad = pg + (n0 * g.out_channels + grp * s.outputs) * s.positions;
          if (nb > 1) {
            gather_images(pg, g.out_channels, s.outputs, s.positions, n0, nb, grp, grads.get());
            grad = grads.get();
          }
          // weightᵀ · grad: the weight block is stored [O/groups, col_rows], read transposed.
          T* cols = s.pointwise ? image : col.get();
          gemm<T>(true, false, s.col_rows, ld, s.outputs, pw + grp * s.outputs * s.col_rows,
                  s.col_rows, grad, ld, cols, ld, false);
          if (s.pointwise) continue;
          for (int64_t b = 0; b < nb; ++b) {
            T* target = px + (n0 + b) * image_size + grp * s.channels * g.in_h * g.in_w;
            std::fill(target, target + s.channels * g.in_h * g.in_w, T(0));
            col2im(g, s, col.get() + b * s.positions, ld, target);
          }
        }
      }
    });
  });
}

void im2col_conv2d_backward_weight(const Tensor& grad_out, const Tensor& x,
                                   const Tensor& grad_weight, const Conv2dGeometry& g) {
  const GemmSizes s = gemm_sizes(g);
  visit_f32_f64("conv2d_backward_weight", grad_out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pg = grad_out.data<T>();
    const T* px = x.data<T>();
    T* pw = grad_weight.data<T>();
    const int64_t weight_numel = g.out_channels * s.col_rows;
    const int64_t image_size = g.in_channels * g.in_h * g.in_w;
    std::fill(pw, pw + weight_numel, T(0));
    for_image_chunks(g, s, [&](int64_t begin, int64_t end, int64_t per) {
      // Each thread sums its images into its own copy, so the shared gradient is written once
      // per thread rather than raced on per image.
      const bool alone = begin == 0 && end == g.batch;
      std::vector<T> partial(alone ? 0 : weight_numel, T(0));
      T* acc = alone ? pw : partial.data();
      auto col = scratch<T>(s.pointwise ? 0 : s.col_rows * s.positions * per);
      auto grads = scratch<T>(per > 1 ? s.outputs * s.positions * per : 0);
      for (int64_t n0 = begin; n0 < end; n0 += per) {
        const int64_t nb = std::min(per, end - n0), ld = nb * s.positions;
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          const T* cols = px + n0 * image_size + grp * s.channels * g.in_h * g.in_w;
          if (!s.pointwise) {
            for (int64_t b = 0; b < nb; ++b)
              im2col(g, s, px + (n0 + b) * image_size + grp * s.channels * g.in_h * g.in_w,
                     col.get() + b * s.positions, ld);
            cols = col.get();
          }
          const T* grad = pg + (n0 * g.out_channels + grp * s.outputs) * s.positions;
          if (nb > 1) {
            gather_images(pg, g.out_channels, s.outputs, s.positions, n0, nb, grp, grads.get());
            grad = grads.get();
          }
          // grad · colᵀ: col is stored [col_rows, positions], read transposed.
          gemm<T>(false, true, s.outputs, s.col_rows, ld, grad, ld, cols, ld,
                  acc + grp * s.outputs * s.col_rows, s.col_rows, true);
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
