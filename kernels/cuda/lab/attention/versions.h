// The attention lab (docs/kernels/attention.md): scaled dot-product attention, forward and
// backward, for each of batch_heads independent heads of row-major [L, D] queries and [S, D] keys
// and values (reference.h has the formulas):
//
//   O = softmax(Q K^T * scale [+ causal mask] [+ M]) [* keep / (1 - p)] V
//   lse[l] = log sum_s exp(scale q_l . k_s [+ M_ls])
//
// the causal mask top-left aligned as PyTorch's is_causal (query l attends keys 0..l, also when
// L != S), and the log-sum-exp of each query's scores saved for the backward. v3_tiled_fa1,
// v4_mma_fa2, v1_recompute and v5_tiled (what kiln's op routes to) also take an additive mask
// tensor M and dropout on P (AttentionMask, AttentionDropoutArgs); the other versions refuse them.
//
//   forward (f32)                            backward (f32)
//   v0_kiln          the kernels kiln's      v0_kiln        the kernels kiln's autograd runs
//                    composed op runs                       for the composed op: matmuls,
//                    (cuBLAS, softmax)                      softmax backward
//   v1_naive         three kernels: scores,  v1_recompute   P recomputed from the saved lse:
//                    softmax, P V; the                      dV, dK a warp per key row, dQ a warp
//                    L x S matrix stored                    per query row; no L x S matrix
//   v2_fused_row     a warp per query row,   v5_tiled       FlashAttention-2's backward: a
//                    online softmax: no                     block per 32 keys, K/V in shared
//                    L x S matrix                           memory, each score once, dQ by
//                                                           atomics
//   v3_tiled_fa1     K/V tiles in shared
//                    memory, FlashAttention-1's
//                    loop order (K/V outer)
//
//   tensor cores (bf16 or f16 inputs, f32 accumulation and output)
//   v0_kiln_f32      v0_kiln on the inputs' values converted to f32
//   v4_mma_fa2       mma.sync m16n8k16 fed by ldmatrix, FlashAttention-2's split: a block per
//                    64 query rows, each warp owning 16 of them, K/V tiles streamed (sm_80+)
//
// Bench: kiln-bench lab attention --batch-heads 32 --l 2048 --s 2048 --d 64 [--causal].
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/kernels/cuda/lab/lab.h"

namespace kiln::lab {

// An additive f32 mask on the scores, as kiln's op passes its attn_mask (a bool one converted: 0
// where it attends, -inf where not): element (h, l, s) at data[h stride_h + l stride_l + s
// stride_s], strides 0 where it broadcasts. A row every key of which is removed gives NaN (O and
// lse), as a softmax of nothing. data null: no mask.
struct AttentionMask {
  const float* data = nullptr;
  int64_t stride_h = 0;
  int64_t stride_l = 0;
  int64_t stride_s = 0;
};

// Dropout on the probabilities, kiln's rule (kernels/attention.h): P_ls of head h kept iff
// philox_uniform(seed, offset, (h L + l) S + s) >= p and then scaled by 1 / (1 - p), else
// zeroed; lse stays the undropped softmax's. p = 0: none; 0 <= p < 1.
struct AttentionDropoutArgs {
  double p = 0.0;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

struct AttentionArgs {
  const void* q = nullptr;  // [batch_heads, l, d] of `dtype` on the GPU
  const void* k = nullptr;  // [batch_heads, s, d]
  const void* v = nullptr;  // [batch_heads, s, d]
  float* o = nullptr;       // [batch_heads, l, d]
  float* lse = nullptr;     // [batch_heads, l]: log sum_s exp(score), natural log
  int64_t batch_heads = 0;
  int64_t l = 0;  // queries a head
  int64_t s = 0;  // keys a head
  int64_t d = 0;  // the head dimension, at most kMaxHeadDim (tiling.h)
  float scale = 1.0f;
  bool causal = false;
  DType dtype = DType::f32;   // f32 (v0-v3), bf16 or f16 (v0_kiln_f32, v4)
  void* workspace = nullptr;  // attention_workspace_bytes(batch_heads, l, s) bytes
  AttentionMask mask = {};    // v3 and v4 only
  AttentionDropoutArgs dropout = {};
};

struct AttentionBackwardArgs {
  const float* q = nullptr;     // [batch_heads, l, d]
  const float* k = nullptr;     // [batch_heads, s, d]
  const float* v = nullptr;     // [batch_heads, s, d]
  const float* o = nullptr;     // [batch_heads, l, d], as the forward wrote it
  const float* lse = nullptr;   // [batch_heads, l], as the forward wrote it
  const float* dout = nullptr;  // [batch_heads, l, d]
  float* dq = nullptr;          // [batch_heads, l, d], overwritten
  float* dk = nullptr;          // [batch_heads, s, d], overwritten
  float* dv = nullptr;          // [batch_heads, s, d], overwritten
  int64_t batch_heads = 0;
  int64_t l = 0;
  int64_t s = 0;
  int64_t d = 0;
  float scale = 1.0f;
  bool causal = false;
  void* workspace = nullptr;  // attention_workspace_bytes(batch_heads, l, s) bytes
  AttentionMask mask = {};    // the forward's (v1_recompute and v5_tiled only)
  AttentionDropoutArgs dropout = {};
};

using AttentionVersion = LabVersion<AttentionArgs>;
using AttentionBackwardVersion = LabVersion<AttentionBackwardArgs>;

// Version 0 first. Defined in CUDA builds only.
const std::vector<AttentionVersion>& attention_forward_versions();  // f32
const std::vector<AttentionVersion>& attention_tc_versions();       // bf16, f16
const std::vector<AttentionBackwardVersion>& attention_backward_versions();
size_t attention_workspace_bytes(int64_t batch_heads, int64_t l, int64_t s);
// What every version but v1_naive needs of it (v3's running max and sum, the backward's delta).
size_t attention_row_workspace_bytes(int64_t batch_heads, int64_t l);

namespace attention {
void v0_kiln(const AttentionArgs& args);
void v1_naive(const AttentionArgs& args);
void v2_fused_row(const AttentionArgs& args);
void v3_tiled_fa1(const AttentionArgs& args);
void v4_mma_fa2(const AttentionArgs& args);

void v0_kiln_backward(const AttentionBackwardArgs& args);
void v1_recompute_backward(const AttentionBackwardArgs& args);
void v5_tiled_backward(const AttentionBackwardArgs& args);

// The backward's delta_l = dO_l . O_l for `rows` rows of d floats into delta, on the current
// stream: v1_recompute's kernel, which v5_tiled shares.
void launch_delta(const float* o, const float* dout, float* delta, int64_t rows, int d);
}  // namespace attention

}  // namespace kiln::lab
