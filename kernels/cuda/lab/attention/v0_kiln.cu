// Attention v0: kiln's own path on the GPU, scaled_dot_product_attention (ops/attention.cpp),
// which on CUDA is composed of kiln's matmul (cuBLAS), a masked_fill for the causal mask, softmax
// and a second matmul: the L x S scores and probabilities are tensors in memory, as in PyTorch's
// "math" backend. The log-sum-exp the other versions save is computed from the same ops (the
// scores' max, then log sum exp(scores - max) + max): the op itself does not return it.
//
// Backward: kiln's autograd through the same composition (the matmuls' and softmax's backward
// formulas), from leaves copied from the inputs.
//
// Of the tensor-core table (bf16, f16 inputs) it is the reference too: there it runs on the
// inputs' values converted to f32, so what v4 is checked against is the f32 attention of the same
// numbers.
//
// measured: not yet on a GPU.
#include <limits>

#include "kiln/core/cuda.h"
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"
#include "kiln/kernels/cuda/lab/attention/problem.h"
#include "kiln/kernels/cuda/lab/attention/versions.h"
#include "kiln/kernels/cuda/lab/borrowed_tensor.h"
#include "kiln/ops/attention.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/reduce.h"

namespace kiln::lab::attention {

namespace {

Tensor causal_masked(const Tensor& scores, int64_t l, int64_t s, Device device) {
  const Tensor cols = arange(s, DType::i64, device).unsqueeze(0);
  const Tensor rows = arange(l, DType::i64, device).unsqueeze(1);
  return masked_fill(scores, gt(cols, rows), -std::numeric_limits<double>::infinity());
}

}  // namespace

void v0_kiln(const AttentionArgs& a) {
  check_shape("v0_kiln", a.batch_heads, a.l, a.s, a.d);
  if (a.batch_heads == 0 || a.l == 0) return;
  const Device device = Device::cuda(cuda::current_device());
  const Tensor q = borrow_tensor(a.q, {a.batch_heads, a.l, a.d}, a.dtype, device).to(DType::f32);
  const Tensor k = borrow_tensor(a.k, {a.batch_heads, a.s, a.d}, a.dtype, device).to(DType::f32);
  const Tensor v = borrow_tensor(a.v, {a.batch_heads, a.s, a.d}, a.dtype, device).to(DType::f32);
  Tensor o = borrow_tensor(a.o, {a.batch_heads, a.l, a.d}, DType::f32, device);
  Tensor lse = borrow_tensor(a.lse, {a.batch_heads, a.l}, DType::f32, device);
  o.copy_(scaled_dot_product_attention(q, k, v, {.is_causal = a.causal, .scale = a.scale}));
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), static_cast<double>(a.scale));
  if (a.causal) scores = causal_masked(scores, a.l, a.s, device);
  const Tensor max = amax(scores, {-1}, /*keepdim=*/true);
  lse.copy_(add(log(sum(exp(sub(scores, max)), {-1})), max.squeeze(-1)));
}

void v0_kiln_backward(const AttentionBackwardArgs& a) {
  check_shape("v0_kiln", a.batch_heads, a.l, a.s, a.d);
  if (a.batch_heads == 0) return;
  const Device device = Device::cuda(cuda::current_device());
  Tensor dq = borrow_tensor(a.dq, {a.batch_heads, a.l, a.d}, DType::f32, device);
  Tensor dk = borrow_tensor(a.dk, {a.batch_heads, a.s, a.d}, DType::f32, device);
  Tensor dv = borrow_tensor(a.dv, {a.batch_heads, a.s, a.d}, DType::f32, device);
  if (a.l == 0) {  // no query: nothing reaches the keys
    dk.fill_(0.0);
    dv.fill_(0.0);
    return;
  }
  Tensor q = borrow_tensor(a.q, {a.batch_heads, a.l, a.d}, DType::f32, device).clone();
  Tensor k = borrow_tensor(a.k, {a.batch_heads, a.s, a.d}, DType::f32, device).clone();
  Tensor v = borrow_tensor(a.v, {a.batch_heads, a.s, a.d}, DType::f32, device).clone();
  q.requires_grad_();
  k.requires_grad_();
  v.requires_grad_();
  const Tensor dout = borrow_tensor(a.dout, {a.batch_heads, a.l, a.d}, DType::f32, device);
  scaled_dot_product_attention(q, k, v, {.is_causal = a.causal, .scale = a.scale}).backward(dout);
  dq.copy_(q.grad());
  dk.copy_(k.grad());
  dv.copy_(v.grad());
}

}  // namespace kiln::lab::attention
