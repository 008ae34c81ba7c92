// CPU attention, forward and backward, as milliseconds per call: kiln's fused
// scaled_dot_product_attention (no L x S scores stored) and, in the same run, kiln's composition
// (matmul, softmax, matmul; backends::set_fused_attention_enabled(false)). Its peer is
// attention_cpu_torch.py: PyTorch 1.13's MultiheadAttention internals on the same shapes (q scaled,
// bmm, softmax, bmm: 1.13 has no fused CPU attention). scripts/bench-cpu-attention.sh alternates
// the two.
//
//   benchmarks/attention_cpu --threads 2 --batch 2 --heads 4 --length 1024 --head-dim 64
//   benchmarks/attention_cpu --causal --repeats 10
//   benchmarks/attention_cpu --dropout 0.1   (both draw the same mask; the fused kernels draw it
//                                              where they use it instead of storing it)
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <ratio>
#include <string>

#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

namespace {

struct Timing {
  double forward_ms = std::numeric_limits<double>::infinity();
  double total_ms = std::numeric_limits<double>::infinity();
};

Timing time_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                      double dropout, int64_t repeats) {
  using clock = std::chrono::steady_clock;
  Timing best;
  const Tensor grad = ones(q.shape());
  for (int64_t r = 0; r < repeats + 1; ++r) {  // the first run warms up
    for (const Tensor* t : {&q, &k, &v}) const_cast<Tensor&>(*t).set_grad(Tensor());
    const auto t0 = clock::now();
    const Tensor out =
        scaled_dot_product_attention(q, k, v, {.dropout_p = dropout, .is_causal = causal});
    const auto t1 = clock::now();
    out.backward(grad);
    const auto t2 = clock::now();
    if (r == 0) continue;
    best.forward_ms =
        std::min(best.forward_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
    best.total_ms =
        std::min(best.total_ms, std::chrono::duration<double, std::milli>(t2 - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU attention forward and backward: kiln fused and composed"};
  int64_t threads = 2, batch = 2, heads = 4, length = 1024, head_dim = 64, repeats = 5;
  bool causal = false;
  double dropout = 0.0;
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--heads", heads)->capture_default_str();
  app.add_option("--length", length, "L = S")->capture_default_str();
  app.add_option("--head-dim", head_dim)->capture_default_str();
  app.add_option("--repeats", repeats, "timed calls; the minimum is reported")
      ->capture_default_str();
  app.add_flag("--causal", causal);
  app.add_option("--dropout", dropout, "dropout_p on the attention weights")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return apps::run_main("attention_cpu", [&] {
    omp_set_num_threads(static_cast<int>(threads));
    manual_seed(0);
    const Shape shape{batch, heads, length, head_dim};
    const Tensor q = randn(shape).requires_grad_(), k = randn(shape).requires_grad_();
    const Tensor v = randn(shape).requires_grad_();
    const Timing fused = time_attention(q, k, v, causal, dropout, repeats);
    backends::set_fused_attention_enabled(false);
    const Timing composed = time_attention(q, k, v, causal, dropout, repeats);
    backends::set_fused_attention_enabled(true);
    std::printf(
        "kiln attention cpu f32 [%lld, %lld, %lld, %lld]%s dropout %g threads %lld: fused %.2f ms "
        "(forward %.2f), composed %.2f ms (forward %.2f)\n",
        static_cast<long long>(batch), static_cast<long long>(heads),
        static_cast<long long>(length), static_cast<long long>(head_dim), causal ? " causal" : "",
        dropout, static_cast<long long>(threads), fused.total_ms, fused.forward_ms,
        composed.total_ms, composed.forward_ms);
    return 0;
  });
}
