// The 2-D convolution family, on every device. On the CPU (kernels/cpu/conv2d/, choice.cpp picks
// per pass and shape, by a fixed rule or by timing): kiln's direct kernels for f32 and bf16
// (portable, AVX2 and AVX-512 versions picked at run time), oneDNN's, and im2col + GEMM (f32, and
// the only ones for f64); cuDNN on the GPU (kernels/cuda/conv2d/). Every operand is of one
// dtype and non-empty (ops/conv.cpp settles the zero-size cases), and contiguous, or, where
// takes_channels_last, x, weight, out and the gradients all channels-last instead (the 4-D ones;
// bias is 1-D).
#pragma once

#include <array>
#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

// Sizes of one convolution, already checked by ops/conv.cpp.
struct Conv2dGeometry {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0, out_h = 0, out_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

// The sizes as one row of numbers, for the keys of plan caches (cuDNN's graph plans, the CPU's
// oneDNN plans): equal rows, the same problem. The output sizes follow from the rest.
inline std::array<int64_t, 14> geometry_key(const Conv2dGeometry& g) {
  return {g.batch,    g.in_channels, g.in_h,  g.in_w,  g.out_channels, g.kernel_h,   g.kernel_w,
          g.stride_h, g.stride_w,    g.pad_h, g.pad_w, g.dilation_h,   g.dilation_w, g.groups};
}

struct Conv2dKernels {
  // out [N, O, OH, OW] = conv(x [N, C, H, W], weight [O, C/groups, kH, kW]) + bias [O]; bias may
  // be undefined.
  void (*forward)(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                  const Conv2dGeometry& g);
  // grad_x [N, C, H, W] (overwritten) from grad_out [N, O, OH, OW].
  void (*backward_input)(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                         const Conv2dGeometry& g);
  // grad_weight [O, C/groups, kH, kW] (overwritten) from grad_out and x.
  void (*backward_weight)(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                          const Conv2dGeometry& g);
  // Whether f16 and bf16 go in as they are, accumulating in f32 (cuDNN; the CPU, in bf16 where
  // it has bf16 dot products and through f32 copies made inside the kernel otherwise), rather
  // than through f32 copies made by the op.
  bool takes_half;
  // Whether the operands may come all laid out channels-last (cuDNN's NHWC kernels); a device
  // without it gets them contiguous, and ops/conv.cpp lays the result out as asked.
  bool takes_channels_last;
  // Where takes_half: whether bf16 goes in as it is on GPU `device` (null: on every device).
  // cuDNN has bf16 kernels from compute capability 8.0 on only; below it ops/conv.cpp computes a
  // bf16 convolution in f32 (copies in, the result rounded back), as PyTorch leaves cuDNN there.
  bool (*takes_bf16)(int device) = nullptr;

  static const Conv2dKernels cpu;
  static const Conv2dKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
