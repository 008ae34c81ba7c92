// The 2-D pooling family, on every device (kernels/cpu/pooling.cpp, kernels/cuda/pooling.cu).
// Every tensor arrives as a dense [N, C, H, W] in f32 or f64 (ops/pooling.cpp converts the 16-bit
// floats, but bf16 for max_pool2d where max_pool_takes_bf16): contiguous, or, where
// takes_channels_last, any of them channels-last (each kernel reads each tensor through its own
// strides). No two threads write one element, but for the atomic adds of max_pool2d_backward where
// windows overlap.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

// The window arithmetic of one pooling call, already checked and resolved (stride 0 replaced by
// the kernel size, output sizes computed with ceil_mode applied).
struct Pool2dGeometry {
  int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
};

struct PoolingKernels {
  // out[p, oh, ow] = max of x over the window; indices (i64) holds ih * in_w + iw of that
  // maximum. NaN wins over every number, as in PyTorch.
  void (*max_pool2d)(const Tensor& x, const Tensor& out, const Tensor& indices,
                     const Pool2dGeometry& g);
  // grad_input (zero-filled by the caller) += grad_output at the saved indices; for bf16 see
  // max_pool_takes_bf16.
  void (*max_pool2d_backward)(const Tensor& grad_output, const Tensor& indices,
                              const Tensor& grad_input);
  // Averages over the window clipped to the padded input; the divisor counts the padding when
  // count_include_pad, else only the input elements inside the window.
  void (*avg_pool2d)(const Tensor& x, const Tensor& out, const Pool2dGeometry& g,
                     bool count_include_pad);
  // grad_input (zero-filled by the caller) += grad_output / divisor over each window.
  void (*avg_pool2d_backward)(const Tensor& grad_output, const Tensor& grad_input,
                              const Pool2dGeometry& g, bool count_include_pad);
  // Output cell i covers input rows [floor(i * in / out), ceil((i + 1) * in / out)), likewise for
  // columns, as PyTorch.
  void (*adaptive_avg_pool2d)(const Tensor& x, const Tensor& out);
  void (*adaptive_avg_pool2d_backward)(const Tensor& grad_output, const Tensor& grad_input);
  // Whether tensors may come channels-last (the GPU's); a device without it gets contiguous ones,
  // and ops/pooling.cpp lays the results out as the input was.
  bool takes_channels_last;
  // Whether max_pool2d takes a bf16 x (and writes a bf16 out) as it is: a maximum needs no
  // arithmetic, so no f32 copy of the input; and max_pool2d_backward a bf16 grad_output and
  // grad_input, which it then overwrites (no zero fill), each sum made in f32 and rounded once
  // (the CPU's).
  bool max_pool_takes_bf16;

  static const PoolingKernels cpu;
  static const PoolingKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
