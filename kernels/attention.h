// The fused attention family: softmax(q kᵀ · scale + mask) v without the L x S scores, as
// FlashAttention's loop: each query row runs over the keys in tiles with an online softmax (a
// running maximum and sum, the accumulated output rescaled when the maximum grows), keeping only
// the row's logsumexp for backward, which recomputes the probabilities from it. Layout: q [B, L,
// E], k [B, S, E], v [B, S, Ev], out [B, L, Ev] contiguous, in f32 or f64; lse [B, L] in the same
// dtype. mask, when defined, is an additive [B, L, S] view of the compute dtype (0-strides where
// it broadcasts; -inf removes a score). causal: query i sees keys 0..i. A row whose every score
// is removed gives NaN, as the composed softmax does. dropout, when p > 0, drops attention
// weights after the softmax (AttentionDropout); the backward regenerates the same mask.
// The CPU's kernels (kernels/cpu/attention.cpp) take every problem. The GPU's
// (kernels/cuda/attention.cpp) are the kernel lab's attention versions, and take only what a lab
// route sends them (kernels/cuda/lab_routes.h; the built-in table is empty, so by default
// ops/attention.cpp composes matmul and softmax there).
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"

namespace kiln {

// Dropout on the attention weights P = softmax(...), drawn as ops/dropout.cpp's dropout would draw
// it on the contiguous [B, L, S] weights from the same generator state: weight (b, l, s), index
// i = (b L + l) S + s, is kept iff philox_uniform(seed, offset, i) >= p (kernels/dropout.h) and
// then scaled by 1 / (1 - p) (rounded to the compute dtype), else zeroed. The forward gives
// O = (P * keep / (1 - p)) V with lse from the undropped softmax; the backward draws the mask
// again from (seed, offset). p = 0: none; 0 <= p < 1.
struct AttentionDropout {
  double p = 0.0;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

struct AttentionKernels {
  void (*forward)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                  bool causal, double scale, const AttentionDropout& dropout, const Tensor& out,
                  const Tensor& lse);
  // dq, dk, dv (contiguous, shaped as q, k, v) from dout (contiguous, shaped as out) and the
  // forward's out and lse, with the forward's dropout.
  void (*backward)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                   bool causal, double scale, const AttentionDropout& dropout, const Tensor& out,
                   const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                   const Tensor& dv);
  // Whether forward takes the problem of these q, k, v (as the op got them, before any copy) with
  // a mask tensor or none and with dropout or none, and the dtype it reads q, k and v in: the
  // compute dtype, or 16-bit inputs as they are for tensor cores; nullopt: the op composes. Null:
  // every problem, in the compute dtype. The backward takes whatever forward took, in the compute
  // dtype.
  std::optional<DType> (*takes)(const Tensor& q, const Tensor& k, const Tensor& v, bool masked,
                                bool dropout) = nullptr;

  static const AttentionKernels cpu;
  static const AttentionKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
