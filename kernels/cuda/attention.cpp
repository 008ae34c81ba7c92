// The GPU's fused attention: the kernel lab's attention versions (kernels/cuda/lab/attention/),
// taken only where a lab route sends a problem (kernels/cuda/lab_routes.h). The built-in route
// table is empty, so by default takes() declines every problem and ops/attention.cpp composes
// matmul and softmax on the GPU: none of the lab's versions has run on a GPU yet, and code that
// never ran on one is not a default there (docs/results.md, "Where each GPU path ran").
//
// What a route can take is what the lab's versions take: a value head dim equal to the query's,
// f32 inputs for v1-v3 and bf16/f16 ones for v4_mma_fa2 (read as they are; the forward writes f32
// out and lse either way), the head dims of each version, causal or not; a mask tensor (the op's
// additive f32 [B, L, S] view, booleans converted) and dropout (kernels/attention.h's Philox rule,
// so the mask is the CPU's) only for v3_tiled_fa1 and v4_mma_fa2. The backward is the lab's
// v1_recompute in f32 (or v5_tiled where a route names it), from the forward's saved
// log-sum-exp, with the same mask and dropout.
#include "kiln/kernels/attention.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "kiln/core/cuda.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/kernels/copy.h"
#include "kiln/kernels/cuda/lab/attention/versions.h"
#include "kiln/kernels/cuda/lab_routes.h"

namespace kiln {

namespace {

constexpr const char* kWhere = "scaled_dot_product_attention (kernels/cuda/attention.cpp)";

// The lab's [batch_heads, l, d] of q (and [batch_heads, s, d] of k and v) the op's [B, L, D]
// operands are, or the op's inputs [..., L, D] before they are flattened.
struct Problem {
  int64_t batch_heads = 0, l = 0, s = 0, d = 0;
};

Problem problem_of(const Tensor& q, const Tensor& k) {
  Problem p{1, q.size(-2), k.size(-2), q.size(-1)};
  for (int64_t i = 0; i < q.dim() - 2; ++i) p.batch_heads *= q.size(i);
  return p;
}

// Whether a version takes a mask tensor and dropout.
bool takes_mask_and_dropout(const lab::AttentionVersion& version) {
  const std::string name = version.name;
  return name == "v3_tiled_fa1" || name == "v4_mma_fa2";
}

std::optional<DType> takes(const Tensor& q, const Tensor& k, const Tensor& v, bool masked,
                           bool dropout) {
  if (v.size(-1) != q.size(-1)) return std::nullopt;
  const Problem p = problem_of(q, k);
  const lab::AttentionVersion* version =
      cuda::routed_attention(q.dtype(), p.batch_heads, p.l, p.s, p.d);
  if (version == nullptr || ((masked || dropout) && !takes_mask_and_dropout(*version)))
    return std::nullopt;
  return q.dtype();  // f32 for v1-v3; bf16 or f16 as they are for v4
}

// The op's [B, L, S] mask view as the lab's.
lab::AttentionMask mask_of(const Tensor& mask) {
  if (!mask.defined()) return {};
  KILN_CHECK(mask.dtype() == DType::f32 && mask.dim() == 3, Error,
             "{}: expected the mask as an f32 [B, L, S] view, got {}", kWhere, describe(mask));
  return {.data = mask.data<float>(),
          .stride_h = mask.stride(0),
          .stride_l = mask.stride(1),
          .stride_s = mask.stride(2)};
}

lab::AttentionDropoutArgs dropout_of(const AttentionDropout& d) {
  return {.p = d.p, .seed = d.seed, .offset = d.offset};
}

// `bytes` of scratch on the tensor's GPU.
Tensor workspace(size_t bytes, Device device) {
  return empty({static_cast<int64_t>(bytes)}, DType::u8, device);
}

// t, or a copy of it where it does not start on 16 bytes (v4's loads are 16 bytes wide).
Tensor aligned16(const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0) return t;
  const Tensor copy = empty(t.shape(), t.dtype(), t.device());
  CopyKernels::cuda->copy(t, copy);
  return copy;
}

void forward(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& mask, bool causal,
             double scale, const AttentionDropout& dropout, const Tensor& out, const Tensor& lse) {
  const Tensor q = aligned16(q0), k = aligned16(k0), v = aligned16(v0);
  const Problem p = problem_of(q, k);
  const lab::AttentionVersion* version =
      cuda::routed_attention(q.dtype(), p.batch_heads, p.l, p.s, p.d);
  KILN_CHECK(version != nullptr, Error,
             "{}: no lab route for [{}, {}, {}] x [{}, {}, {}] of {}, which takes() routed", kWhere,
             p.batch_heads, p.l, p.d, p.batch_heads, p.s, p.d, dtype_name(q.dtype()));
  KILN_CHECK((!mask.defined() && dropout.p == 0.0) || takes_mask_and_dropout(*version), Error,
             "{}: {} takes no mask tensor and no dropout, which takes() routed to it", kWhere,
             version->name);
  // v1_naive keeps the L x S scores in it; the others at most two floats a query row.
  const size_t bytes = std::string(version->name) == "v1_naive"
                           ? lab::attention_workspace_bytes(p.batch_heads, p.l, p.s)
                           : lab::attention_row_workspace_bytes(p.batch_heads, p.l);
  const Tensor scratch = workspace(bytes, q.device());
  cuda::note_lab_routed_call();
  version->run({.q = q.data_ptr(),
                .k = k.data_ptr(),
                .v = v.data_ptr(),
                .o = out.data<float>(),
                .lse = lse.data<float>(),
                .batch_heads = p.batch_heads,
                .l = p.l,
                .s = p.s,
                .d = p.d,
                .scale = static_cast<float>(scale),
                .causal = causal,
                .dtype = q.dtype(),
                .workspace = scratch.data_ptr(),
                .mask = mask_of(mask),
                .dropout = dropout_of(dropout)});
}

void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
              double scale, const AttentionDropout& dropout, const Tensor& out, const Tensor& lse,
              const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  KILN_CHECK(q.dtype() == DType::f32, Error, "{}: the lab's backward takes f32 operands, got {}",
             kWhere, dtype_name(q.dtype()));
  const Problem p = problem_of(q, k);
  const Tensor scratch =
      workspace(lab::attention_row_workspace_bytes(p.batch_heads, p.l), q.device());
  cuda::routed_attention_backward(p.s).run({.q = q.data<float>(),
                                            .k = k.data<float>(),
                                            .v = v.data<float>(),
                                            .o = out.data<float>(),
                                            .lse = lse.data<float>(),
                                            .dout = dout.data<float>(),
                                            .dq = dq.data<float>(),
                                            .dk = dk.data<float>(),
                                            .dv = dv.data<float>(),
                                            .batch_heads = p.batch_heads,
                                            .l = p.l,
                                            .s = p.s,
                                            .d = p.d,
                                            .scale = static_cast<float>(scale),
                                            .causal = causal,
                                            .workspace = scratch.data_ptr(),
                                            .mask = mask_of(mask),
                                            .dropout = dropout_of(dropout)});
}

constexpr AttentionKernels kCuda{.forward = forward, .backward = backward, .takes = takes};

}  // namespace

const AttentionKernels* const AttentionKernels::cuda = &kCuda;

}  // namespace kiln
