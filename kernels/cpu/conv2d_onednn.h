// Convolutions through oneDNN (Debian's libdnnl-dev, the library under PyTorch's CPU
// convolutions), for the passes and dtypes where its kernels measured faster than kiln's own
// (conv2d_onednn.cpp has the rule and docs/results.md the figures). kiln's direct kernels stay the
// reference and run everything else; a build without oneDNN runs them always.
#pragma once

#include "kiln/core/tensor.h"
#include "kiln/kernels/conv2d.h"

namespace kiln::cpu {

enum class ConvPass { forward, input_grad, weight_grad };

// Runs the pass through oneDNN and returns true when the rule picks oneDNN for it; returns false,
// having done nothing, otherwise. The operands are those of Conv2dKernels' function for the pass:
// forward (x, weight, bias, out), input_grad (grad_out, weight, -, grad_x), weight_grad (grad_out,
// x, -, grad_weight); `result` is overwritten.
bool onednn_conv2d(ConvPass pass, const Tensor& a, const Tensor& b, const Tensor& bias,
                   const Tensor& result, const Conv2dGeometry& g);

}  // namespace kiln::cpu
