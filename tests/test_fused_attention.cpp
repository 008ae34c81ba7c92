// The fused CPU attention (kernels/cpu/attention.cpp) against the composition it replaces
// (backends::set_fused_attention_enabled(false)): outputs and the gradients of query, key and
// value for odd lengths (1, 7, 129, L != S), causal, bool, float and broadcast masks, unbatched
// inputs, every dtype, without and with dropout (the fused kernels draw the composition's mask
// from the same generator state); double backward through dropout; a fully masked row; which
// calls fuse; and the memory it saves.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

// Turns the fused kernels off for its scope.
class Composed {
 public:
  Composed() { backends::set_fused_attention_enabled(false); }
  ~Composed() { backends::set_fused_attention_enabled(true); }
};

struct Run {
  Tensor out, dq, dk, dv;
  std::string node;
};

Run run(const Tensor& q0, const Tensor& k0, const Tensor& v0, const AttentionOptions& options,
        const Tensor& grad) {
  Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_();
  Tensor v = v0.detach().requires_grad_();
  Tensor out = scaled_dot_product_attention(q, k, v, options);
  Run r{out.detach(), {}, {}, {}, out.grad_fn()->name()};
  (out.to(DType::f64) * grad).sum().backward();
  r.dq = q.grad(), r.dk = k.grad(), r.dv = v.grad();
  return r;
}

void check_close(const Tensor& a, const Tensor& b, double tol) {
  INFO("max |a - b| = " << (a.to(DType::f64) - b.to(DType::f64)).abs().max().item());
  CHECK(allclose(a.to(DType::f64), b.to(DType::f64), tol, tol, true));
}

}  // namespace

TEST_CASE("fused attention equals the composition: lengths, masks, causal, dtypes, dropout") {
  manual_seed(3);
  struct Case {
    Shape q, k, v;
    int mask;  // 0 none, 1 bool [L, S], 2 float [L, S], 3 key padding [N, 1, 1, S], 4 causal
  };
  const std::vector<Case> cases = {
      {{2, 3, 7, 8}, {2, 3, 5, 8}, {2, 3, 5, 6}, 0},
      {{1, 1, 1, 4}, {1, 1, 129, 4}, {1, 1, 129, 3}, 0},
      {{2, 129, 16}, {2, 7, 16}, {2, 7, 16}, 0},
      {{2, 2, 9, 8}, {2, 2, 9, 8}, {2, 2, 9, 8}, 4},
      {{2, 2, 7, 8}, {2, 2, 12, 8}, {2, 2, 12, 5}, 4},
      {{2, 2, 6, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}, 1},
      {{2, 2, 6, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}, 2},
      {{2, 3, 6, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}, 3},
      {{7, 8}, {5, 8}, {5, 6}, 0},
  };
  for (const DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    for (size_t c = 0; c < 2 * cases.size(); ++c) {
      // The cases twice: as they are, then with dropout drawn from one generator state by both.
      const Case& tc = cases[c % cases.size()];
      const double p = c < cases.size() ? 0.0 : 0.3;
      INFO("case " << c % cases.size() << " in " << dtype_name(dtype) << ", dropout " << p);
      const Tensor q = randn(tc.q, DType::f64), k = randn(tc.k, DType::f64);
      const Tensor v = randn(tc.v, DType::f64);
      const int64_t L = tc.q[tc.q.size() - 2], S = tc.k[tc.k.size() - 2];
      AttentionOptions options;
      if (tc.mask == 1 || tc.mask == 2 || tc.mask == 3) {
        // Key 0 always kept, so no row is fully masked.
        Shape shape = tc.mask == 3 ? Shape{tc.q[0], 1, 1, S} : Shape{L, S};
        Tensor keep = logical_or(gt(randn(shape), 0.0), eq(arange(S), 0));
        options.attn_mask = tc.mask == 2 ? randn({L, S}, DType::f64).to(dtype) : keep;
      }
      options.is_causal = tc.mask == 4;
      options.dropout_p = p;
      Shape out_shape = tc.q;
      out_shape.back() = tc.v.back();
      const Tensor grad = randn(out_shape, DType::f64);
      // Both in the dtype, and the composition in f64 as the reference.
      manual_seed(40 + c);
      const Run fused = run(q.to(dtype), k.to(dtype), v.to(dtype), options, grad);
      CHECK(fused.node == "FusedAttentionBackward");
      Run reference;
      {
        Composed composed;
        AttentionOptions f64_options = options;
        if (tc.mask == 2) f64_options.attn_mask = options.attn_mask.to(DType::f64);
        manual_seed(40 + c);
        reference = run(q, k, v, f64_options, grad);
      }
      CHECK(reference.node != "FusedAttentionBackward");
      const double tol = dtype == DType::f64    ? 1e-12
                         : dtype == DType::f32  ? 1e-5
                         : dtype == DType::bf16 ? 3e-2
                                                : 4e-3;
      check_close(fused.out, reference.out, tol);
      check_close(fused.dq, reference.dq, 2 * tol);
      check_close(fused.dk, reference.dk, 2 * tol);
      check_close(fused.dv, reference.dv, 2 * tol);
    }
  }
}

TEST_CASE("fused attention: a fully masked row is NaN as in the composition; what does not fuse") {
  const Tensor q = randn({1, 2, 4}), k = randn({1, 3, 4}), v = randn({1, 3, 2});
  const Tensor none = zeros({2, 3}, DType::boolean).index_put_({0}, 1.0);  // row 1 sees nothing
  const Tensor fused = scaled_dot_product_attention(q, k, v, {.attn_mask = none});
  CHECK_FALSE(std::isnan(fused.index({0, 0, 0}).item()));
  CHECK(std::isnan(fused.index({0, 1, 0}).item()));
  {
    Composed composed;
    const Tensor plain = scaled_dot_product_attention(q, k, v, {.attn_mask = none});
    CHECK(std::isnan(plain.index({0, 1, 0}).item()));
  }
  // Dropout fuses below 1 (p = 1 draws nothing); a batch shape that broadcasts, a mask that widens
  // the batch shape and a mask that wants a gradient compose.
  Tensor qg = q.detach().requires_grad_();
  CHECK(scaled_dot_product_attention(qg, k, v, {.dropout_p = 0.5}).grad_fn()->name() ==
        "FusedAttentionBackward");
  CHECK(scaled_dot_product_attention(qg, k, v, {.dropout_p = 1.0}).grad_fn()->name() !=
        "FusedAttentionBackward");
  const Tensor wide = zeros({2, 1, 2, 3});  // added to the scores [1, 2, 3]: [2, 1, 2, 3]
  const Tensor widened = scaled_dot_product_attention(qg, k, v, {.attn_mask = wide});
  CHECK(widened.shape() == Shape{2, 1, 2, 2});
  CHECK(widened.grad_fn()->name() != "FusedAttentionBackward");
  CHECK(scaled_dot_product_attention(qg, k.expand({1, 3, 4}).squeeze(0), v.squeeze(0))
            .grad_fn()
            ->name() != "FusedAttentionBackward");
  Tensor bias = zeros({2, 3}).requires_grad_();
  CHECK(scaled_dot_product_attention(qg, k, v, {.attn_mask = bias}).grad_fn()->name() !=
        "FusedAttentionBackward");
  CHECK(scaled_dot_product_attention(qg, k, v).grad_fn()->name() == "FusedAttentionBackward");
}

TEST_CASE("fused attention dropout: the composition's mask, its draw, and double backward") {
  const Tensor q = randn({2, 2, 9, 8}, DType::f64), k = randn({2, 2, 11, 8}, DType::f64);
  const Tensor v = randn({2, 2, 11, 5}, DType::f64), grad = randn({2, 2, 9, 5}, DType::f64);
  const AttentionOptions options{.dropout_p = 0.5};
  // The same seed: the same mask; the next draw of the generator is the same afterwards too.
  manual_seed(8);
  const Run fused = run(q, k, v, options, grad);
  const Tensor after_fused = randn({4}, DType::f64);
  CHECK(fused.node == "FusedAttentionBackward");
  Run composed_run;
  Tensor after_composed, other_seed;
  {
    Composed composed;
    manual_seed(8);
    composed_run = run(q, k, v, options, grad);
    after_composed = randn({4}, DType::f64);
    manual_seed(9);
    other_seed = scaled_dot_product_attention(q, k, v, options);
  }
  check_close(fused.out, composed_run.out, 1e-12);
  check_close(fused.dq, composed_run.dq, 1e-12);
  check_close(fused.dk, composed_run.dk, 1e-12);
  check_close(fused.dv, composed_run.dv, 1e-12);
  CHECK(equal(after_fused, after_composed));
  // The mask matters: another seed, or no dropout, gives another output.
  CHECK_FALSE(allclose(fused.out, other_seed, 1e-3, 1e-3));
  CHECK_FALSE(allclose(fused.out, scaled_dot_product_attention(q, k, v), 1e-3, 1e-3));

  // Double backward: the fused node recomposes with the forward's mask (seed and offset), so the
  // second derivatives equal the composition's, though the generator has moved on.
  auto second = [&](bool fuse) {
    backends::set_fused_attention_enabled(fuse);
    Tensor qq = q.detach().requires_grad_(), kk = k.detach().requires_grad_();
    Tensor vv = v.detach().requires_grad_();
    manual_seed(12);
    const Tensor out = scaled_dot_product_attention(qq, kk, vv, options);
    (void)randn({3});  // the generator moves on before the backward
    const std::vector<Tensor> g =
        autograd::grad({(out * grad).sum()}, {qq, kk, vv}, {}, {.create_graph = true});
    add((g[0] * g[0]).sum(), mul(g[1], g[2].sum()).sum()).backward();
    backends::set_fused_attention_enabled(true);
    return std::vector<Tensor>{out.detach(), g[0].detach(), qq.grad(), kk.grad(), vv.grad()};
  };
  const std::vector<Tensor> fused2 = second(true), composed2 = second(false);
  for (size_t i = 0; i < fused2.size(); ++i) {
    INFO("tensor " << i);
    check_close(fused2[i], composed2[i], 1e-10);
  }
}

namespace {

// The CPU memory forward + backward of one head of 64 at L = S = length takes beyond its inputs
// and outputs: the peak of the allocator's bytes over its level before.
int64_t extra_peak(int64_t length, bool fused) {
  backends::set_fused_attention_enabled(fused);
  manual_seed(0);
  Tensor q = randn({1, length, 64}).requires_grad_(), k = randn({1, length, 64}).requires_grad_();
  Tensor v = randn({1, length, 64}).requires_grad_();
  Tensor grad = randn({1, length, 64});
  const int64_t before = memory_stats().current_bytes;
  reset_peak_memory_stats();
  scaled_dot_product_attention(q, k, v).backward(grad);
  const int64_t peak = memory_stats().peak_bytes - before;
  backends::set_fused_attention_enabled(true);
  return peak;
}

}  // namespace

TEST_CASE("fused attention: forward + backward without the L x S scores") {
  const int64_t fused = extra_peak(512, true), composed = extra_peak(512, false);
  INFO("extra peak bytes at L = S = 512: fused " << fused << ", composed " << composed);
  CHECK(fused * 5 < composed);
}

// The measurement (docs/results.md): test_nn_layers "[.memory]" runs it.
TEST_CASE("fused attention memory at L = S = 4096", "[.memory]") {
  const int64_t fused = extra_peak(4096, true), composed = extra_peak(4096, false);
  std::printf(
      "extra peak at L = S = 4096, one head of 64, f32: fused %.1f MiB, composed %.1f MiB\n",
      fused / 1048576.0, composed / 1048576.0);
  CHECK(fused * 5 < composed);
}
