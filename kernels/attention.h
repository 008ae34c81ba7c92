// The fused attention family: softmax(q kᵀ · scale + mask) v without the L x S scores, as
// FlashAttention's loop: each query row runs over the keys in tiles with an online softmax (a
// running maximum and sum, the accumulated output rescaled when the maximum grows), keeping only
// the row's logsumexp for backward, which recomputes the probabilities from it. Layout: q [B, L,
// E], k [B, S, E], v [B, S, Ev], out [B, L, Ev] contiguous, in f32 or f64; lse [B, L] in the same
// dtype. mask, when defined, is an additive [B, L, S] view of the compute dtype (0-strides where
// it broadcasts; -inf removes a score). causal: query i sees keys 0..i. A row whose every score
// is removed gives NaN, as the composed softmax does.
// Only the CPU has it (kernels/cpu/attention.cpp); the GPU's table is empty
// (kernels/cuda/attention.cpp) and ops/attention.cpp composes matmul and softmax there.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

struct AttentionKernels {
  void (*forward)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                  bool causal, double scale, const Tensor& out, const Tensor& lse);
  // dq, dk, dv (contiguous, shaped as q, k, v) from dout (contiguous, shaped as out) and the
  // forward's out and lse.
  void (*backward)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                   bool causal, double scale, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv);

  static const AttentionKernels cpu;
  static const AttentionKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
