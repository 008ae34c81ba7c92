// One pass of a convolution as the CPU's implementations take it (choice.cpp picks which runs it).
#pragma once

#include "kiln/core/tensor.h"
#include "kiln/kernels/conv2d.h"

namespace kiln::cpu {

enum class ConvPass { forward, input_grad, weight_grad };

// The operands are those of Conv2dKernels' function for the pass: forward (x, weight, bias, out),
// input_grad (grad_out, weight, -, grad_x), weight_grad (grad_out, x, -, grad_weight); all of one
// dtype and contiguous; `result` is overwritten, and bias may be undefined.
struct ConvCall {
  ConvPass pass;
  Tensor a, b, bias, result;
  Conv2dGeometry g;
  // A forward whose weight gradient will follow on oneDNN: oneDNN keeps its blocked copy of x
  // for it (onednn.h).
  bool keep_input = false;

  DType dtype() const { return a.dtype(); }
};

}  // namespace kiln::cpu
