// bf16 matrix products through oneDNN's matmul primitive, as PyTorch 1.13 runs them on the CPU:
// bf16 operands read as they are, products summed in f32, the result rounded to bf16 once. Its
// JIT kernels use what the CPU has: AVX512-BF16's dot products on a Zen 4/5 or a Cooper Lake,
// AMX's tiles on a Sapphire Rapids; where oneDNN has neither it would run reference code, and the
// product goes through f32 copies instead (kernels/cpu/matmul.cpp).
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::cpu {

// out = a b (out += a b with accumulate) for bf16 a, b and out as MatmulKernels::batched_matmul
// takes them. False, having written nothing, when oneDNN is off or capped to another level than
// kiln's, when the batch strides of an operand fold into no single batch dimension, or when
// oneDNN has no JIT kernel for the problem: the caller computes it another way.
bool onednn_bf16_matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate);

}  // namespace kiln::cpu
