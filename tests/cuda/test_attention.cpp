// Attention on cuda:0 against the CPU: scaled_dot_product_attention (causal, masks) and
// nn::MultiheadAttention / TransformerEncoderLayer forward and backward, from the same weights.
// The composition's ops each have their own GPU kernels; this checks that they compose. With a
// lab route set (kernels/cuda/lab_routes.h), the op runs the attention lab's fused versions
// instead: their outputs and gradients against the CPU's fused kernels, with masks and dropout
// against the CPU's composition on the same generator state, what still composes, and dropout's
// refusal in a CUDA graph capture.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gradcheck.h"
#include "kiln/core/cuda.h"
#include "kiln/kernels/cuda/lab_routes.h"
#include "kiln/kiln.h"

using namespace kiln;
using kiln::testing::random_f64;

namespace {

const Device kGpu = Device::cuda(0);

void check_close(const Tensor& gpu, const Tensor& cpu, double tol) {
  REQUIRE(gpu.device() == kGpu);
  CHECK(allclose(gpu.cpu(), cpu, tol, tol));
}

}  // namespace

TEST_CASE("attention: scaled_dot_product_attention on the GPU equals the CPU's, with gradients") {
  for (const bool causal : {false, true}) {
    const Tensor q = random_f64({2, 3, 7, 8}, 1), k = random_f64({2, 3, 9, 8}, 2);
    const Tensor v = random_f64({2, 3, 9, 5}, 3);
    auto run = [&](Device device) {
      Tensor qd = q.to(device).detach().requires_grad_(true),
             kd = k.to(device).detach().requires_grad_(true),
             vd = v.to(device).detach().requires_grad_(true);
      const Tensor out = scaled_dot_product_attention(qd, kd, vd, {.is_causal = causal});
      mul(out, out).sum().backward();
      return std::vector<Tensor>{out, qd.grad(), kd.grad(), vd.grad()};
    };
    const auto cpu = run(Device::cpu()), gpu = run(kGpu);
    for (size_t i = 0; i < cpu.size(); ++i) check_close(gpu[i], cpu[i], 1e-10);
  }
}

TEST_CASE("attention: a TransformerEncoderLayer trains the same on the GPU") {
  manual_seed(4);
  auto cpu = std::make_shared<nn::TransformerEncoderLayer>(
      16, 4,
      nn::TransformerEncoderLayerOptions{
          .dim_feedforward = 24, .dropout = 0.0, .batch_first = true});
  auto gpu = std::make_shared<nn::TransformerEncoderLayer>(
      16, 4,
      nn::TransformerEncoderLayerOptions{
          .dim_feedforward = 24, .dropout = 0.0, .batch_first = true});
  gpu->load_state_dict(cpu->state_dict());
  gpu->to(kGpu);
  const Tensor x = random_f64({2, 5, 16}, 5).to(DType::f32);
  const Tensor padding = ne(tensor({0, 0, 0, 1, 1, 0, 0, 0, 0, 1}).reshape({2, 5}), 0.0);
  const nn::EncoderMasks masks{.src_key_padding_mask = padding};
  const Tensor out_cpu = cpu->forward(x, masks);
  const Tensor out_gpu = gpu->forward(x.to(kGpu), {.src_key_padding_mask = padding.to(kGpu)});
  check_close(out_gpu, out_cpu, 1e-4);
  mul(out_cpu, out_cpu).sum().backward();
  mul(out_gpu, out_gpu).sum().backward();
  const auto cpu_params = cpu->named_parameters(), gpu_params = gpu->named_parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    INFO(cpu_params[i].first);
    check_close(gpu_params[i].second.grad(), cpu_params[i].second.grad(), 1e-3);
  }
}

namespace {

// Puts the lab routes back to the (empty) built-in table at the end of a test.
struct RoutesGuard {
  ~RoutesGuard() { cuda::set_lab_routes({}); }
};

struct Attended {
  Tensor out, dq, dk, dv;
  std::string node;  // the output's grad_fn
};

Attended attend(const Tensor& q0, const Tensor& k0, const Tensor& v0, const AttentionOptions& o,
                Device device) {
  Tensor q = q0.to(device).detach().requires_grad_(true);
  Tensor k = k0.to(device).detach().requires_grad_(true);
  Tensor v = v0.to(device).detach().requires_grad_(true);
  const Tensor out = scaled_dot_product_attention(q, k, v, o);
  Attended a{out.detach().cpu(), {}, {}, {}, out.grad_fn()->name()};
  const Tensor weight = random_f64(out.shape(), 77).to(out.dtype()).to(device);
  mul(out, weight).sum().backward();
  a.dq = q.grad().cpu(), a.dk = k.grad().cpu(), a.dv = v.grad().cpu();
  return a;
}

void check_near(const Tensor& got, const Tensor& want, double tol) {
  const Tensor g = got.to(DType::f64), w = want.to(DType::f64);
  INFO("max |got - want| = " << (g - w).abs().max().item());
  CHECK(allclose(g, w, tol, tol));
}

}  // namespace

// Under KILN_SIM_COMPUTE_CAPABILITY=75 (sim_attention_route_on_sm75) the bf16 route to v4 is not
// taken and the op composes, saying so once on stderr.
TEST_CASE("attention: a lab route runs the lab's fused kernels on the GPU with gradients") {
  RoutesGuard guard;
  cuda::set_lab_routes(cuda::parse_lab_routes("attention:1-:v3_tiled_fa1,attention:1-:v4_mma_fa2"));
  const bool ampere = cuda::get_device_properties(0).major >= 8;
  struct Case {
    Shape q, k;  // v is shaped as k
    DType dtype;
  };
  // Odd lengths (1, 7, 65 and 129), L != S both ways, several K/V and query tiles; bf16 at v4's
  // head dims.
  const std::vector<Case> cases = {
      {{1, 1, 1, 8}, {1, 1, 1, 8}, DType::f32},      {{2, 3, 7, 8}, {2, 3, 7, 8}, DType::f32},
      {{1, 65, 12}, {1, 65, 12}, DType::f32},        {{2, 7, 8}, {2, 129, 8}, DType::f32},
      {{1, 2, 129, 16}, {1, 2, 7, 16}, DType::f32},  {{2, 7, 16}, {2, 7, 16}, DType::bf16},
      {{1, 1, 129, 32}, {1, 1, 7, 32}, DType::bf16}, {{1, 7, 16}, {1, 129, 16}, DType::bf16},
      {{1, 1, 1, 16}, {1, 1, 1, 16}, DType::bf16},
  };
  uint64_t seed = 100;
  for (const Case& c : cases)
    for (const bool causal : {false, true}) {
      INFO("q " << shape_str(c.q) << ", k " << shape_str(c.k) << ", " << dtype_name(c.dtype)
                << (causal ? ", causal" : ""));
      const Tensor q = random_f64(c.q, ++seed).to(c.dtype), k = random_f64(c.k, ++seed).to(c.dtype);
      const Tensor v = random_f64(c.k, ++seed).to(c.dtype);
      const AttentionOptions options{.is_causal = causal,
                                     .scale = causal ? std::optional<double>(0.3) : std::nullopt};
      const Attended cpu = attend(q, k, v, options, Device::cpu());
      const uint64_t before = cuda::lab_routed_calls();
      const Attended gpu = attend(q, k, v, options, kGpu);
      const bool routed = c.dtype == DType::f32 || ampere;
      CHECK(cuda::lab_routed_calls() == before + (routed ? 1 : 0));
      CHECK((gpu.node == "FusedAttentionBackward") == routed);
      CHECK(cpu.node == "FusedAttentionBackward");
      // v4 rounds P to bf16 before P V, as FlashAttention-2; the outputs are bf16 either way.
      const double tol = c.dtype == DType::f32 ? 2e-5 : 3e-2;
      check_near(gpu.out, cpu.out, tol);
      check_near(gpu.dq, cpu.dq, tol);
      check_near(gpu.dk, cpu.dk, tol);
      check_near(gpu.dv, cpu.dv, tol);
    }
}

TEST_CASE("attention: without a lab route or outside what the lab takes the GPU composes") {
  RoutesGuard guard;
  REQUIRE(cuda::lab_routes().empty());
  const Tensor q = random_f64({2, 7, 16}, 11).to(DType::f32);
  const Tensor k = random_f64({2, 9, 16}, 12).to(DType::f32);
  const Tensor v = random_f64({2, 9, 16}, 13).to(DType::f32);
  const uint64_t before = cuda::lab_routed_calls();
  const Attended composed = attend(q, k, v, {}, kGpu);
  CHECK(composed.node != "FusedAttentionBackward");
  CHECK(cuda::lab_routed_calls() == before);

  // v2_fused_row takes no mask tensor and no dropout: those calls compose.
  cuda::set_lab_routes(cuda::parse_lab_routes("attention:8-100:v2_fused_row"));
  const Tensor mask = gt(random_f64({7, 9}, 14), -0.5).to(kGpu);
  CHECK(attend(q, k, v, {.attn_mask = mask}, kGpu).node != "FusedAttentionBackward");
  CHECK(attend(q, k, v, {.dropout_p = 0.5}, kGpu).node != "FusedAttentionBackward");
  CHECK(cuda::lab_routed_calls() == before);
  CHECK(attend(q, k, v, {}, kGpu).node == "FusedAttentionBackward");
  CHECK(cuda::lab_routed_calls() == before + 1);

  cuda::set_lab_routes(cuda::parse_lab_routes("attention:8-100:v3_tiled_fa1"));
  CHECK(attend(q, k, v, {}, kGpu).node == "FusedAttentionBackward");
  CHECK(cuda::lab_routed_calls() == before + 2);
  const std::vector<std::pair<std::string, Attended>> declined = {
      {"f64", attend(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), {}, kGpu)},
      {"S outside the route", attend(q, k.narrow(1, 0, 7), v.narrow(1, 0, 7), {}, kGpu)},
      {"value of another head dim", attend(q, k, v.narrow(2, 0, 5), {}, kGpu)},
      {"bf16 with no route to v4",
       attend(q.to(DType::bf16), k.to(DType::bf16), v.to(DType::bf16), {}, kGpu)},
      {"a head dim past the lab's", attend(random_f64({1, 3, 130}, 15).to(DType::f32),
                                           random_f64({1, 9, 130}, 16).to(DType::f32),
                                           random_f64({1, 9, 130}, 17).to(DType::f32), {}, kGpu)},
  };
  for (const auto& [what, run] : declined) {
    INFO(what);
    CHECK(run.node != "FusedAttentionBackward");
  }
  CHECK(cuda::lab_routed_calls() == before + 2);
  // A v4 head dim 48 is not one of v4's: bf16 at 48 composes even with a v4 route.
  cuda::set_lab_routes(cuda::parse_lab_routes("attention:1-:v4_mma_fa2"));
  CHECK(attend(random_f64({1, 3, 48}, 18).to(DType::bf16),
               random_f64({1, 5, 48}, 19).to(DType::bf16),
               random_f64({1, 5, 48}, 20).to(DType::bf16), {}, kGpu)
            .node != "FusedAttentionBackward");
  CHECK(cuda::lab_routed_calls() == before + 2);
}

namespace {

// Turns the fused kernels off for its scope.
class Composed {
 public:
  Composed() { backends::set_fused_attention_enabled(false); }
  ~Composed() { backends::set_fused_attention_enabled(true); }
};

}  // namespace

// The routed versions with a mask tensor and dropout against the composition on the CPU, in f64
// on the same (rounded) inputs, from the same generator state: the fused kernels draw the
// composition's dropout mask (kernels/attention.h), so one seed gives one result on both.
TEST_CASE("attention: a lab route takes masks and dropout as the composition draws them") {
  RoutesGuard guard;
  const bool ampere = cuda::get_device_properties(0).major >= 8;
  struct Case {
    Shape q, k;  // v is shaped as k
    DType dtype;
    int mask;  // 0 none, 1 bool [L, S], 2 float [L, S], 3 key padding [N, 1, 1, S], 4 causal
    double p;  // dropout
  };
  // Odd lengths (1, 7, 129), L != S both ways; where a float mask meets S > 32, row 0's first 32
  // keys are removed: a wholly masked first key tile for v3 and v4.
  const std::vector<Case> cases = {
      {{2, 3, 7, 8}, {2, 3, 9, 8}, DType::f32, 1, 0.0},
      {{1, 2, 129, 16}, {1, 2, 7, 16}, DType::f32, 2, 0.3},
      {{2, 7, 8}, {2, 40, 8}, DType::f32, 2, 0.25},
      {{2, 2, 7, 12}, {2, 2, 129, 12}, DType::f32, 3, 0.2},
      {{1, 1, 1, 8}, {1, 1, 1, 8}, DType::f32, 0, 0.5},
      {{1, 2, 9, 8}, {1, 2, 9, 8}, DType::f32, 4, 0.4},
      {{2, 7, 16}, {2, 7, 16}, DType::bf16, 1, 0.3},
      {{1, 1, 129, 32}, {1, 1, 7, 32}, DType::bf16, 2, 0.0},
      {{1, 2, 7, 16}, {1, 2, 70, 16}, DType::bf16, 3, 0.5},
      {{1, 2, 7, 16}, {1, 2, 40, 16}, DType::bf16, 2, 0.5},
      {{1, 9, 16}, {1, 9, 16}, DType::bf16, 4, 0.2},
  };
  // The backward by v1_recompute (the default), then by v5_tiled (a route names it).
  const std::vector<std::string> tables = {
      "attention:1-:v3_tiled_fa1,attention:1-:v4_mma_fa2",
      "attention:1-:v3_tiled_fa1,attention:1-:v4_mma_fa2,attention:1-:v5_tiled",
  };
  for (const std::string& routes : tables) {
    cuda::set_lab_routes(cuda::parse_lab_routes(routes));
    uint64_t seed = 300;
    for (size_t c = 0; c < cases.size(); ++c) {
      const Case& tc = cases[c];
      INFO(routes << ", case " << c << ": q " << shape_str(tc.q) << ", k " << shape_str(tc.k)
                  << ", " << dtype_name(tc.dtype) << ", mask " << tc.mask << ", dropout " << tc.p);
      const Tensor q = random_f64(tc.q, ++seed).to(tc.dtype);
      const Tensor k = random_f64(tc.k, ++seed).to(tc.dtype);
      const Tensor v = random_f64(tc.k, ++seed).to(tc.dtype);
      const int64_t L = tc.q[tc.q.size() - 2], S = tc.k[tc.k.size() - 2];
      AttentionOptions options{.dropout_p = tc.p, .is_causal = tc.mask == 4};
      if (tc.mask == 1 || tc.mask == 3) {
        // Key S - 1 always kept, so no row is wholly masked.
        const Shape shape = tc.mask == 3 ? Shape{tc.q[0], 1, 1, S} : Shape{L, S};
        options.attn_mask = logical_or(gt(random_f64(shape, ++seed), 0.0),
                                       eq(arange(S), static_cast<double>(S - 1)));
      } else if (tc.mask == 2) {
        Tensor bias = random_f64({L, S}, ++seed);
        if (S > 32) bias.narrow(1, 0, 32).narrow(0, 0, 1).fill_(-INFINITY);
        options.attn_mask = bias;
      }
      AttentionOptions gpu_options = options;
      if (tc.mask == 2) gpu_options.attn_mask = options.attn_mask.to(tc.dtype).to(kGpu);
      if (tc.mask == 1 || tc.mask == 3) gpu_options.attn_mask = options.attn_mask.to(kGpu);
      const uint64_t before = cuda::lab_routed_calls();
      manual_seed(50 + c);
      const Attended gpu = attend(q, k, v, gpu_options, kGpu);
      const bool routed = tc.dtype == DType::f32 || ampere;
      CHECK(cuda::lab_routed_calls() == before + (routed ? 1 : 0));
      CHECK((gpu.node == "FusedAttentionBackward") == routed);
      Attended cpu;
      {
        Composed composed;
        AttentionOptions cpu_options = options;
        if (tc.mask == 2) cpu_options.attn_mask = options.attn_mask.to(tc.dtype).to(DType::f64);
        manual_seed(50 + c);
        cpu = attend(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), cpu_options,
                     Device::cpu());
      }
      CHECK(cpu.node != "FusedAttentionBackward");
      // v4 rounds P (dropped) to bf16 before P V, and its outputs are bf16.
      const double tol = tc.dtype == DType::f32 ? 5e-5 : 4e-2;
      check_near(gpu.out, cpu.out, tol);
      check_near(gpu.dq, cpu.dq, tol);
      check_near(gpu.dk, cpu.dk, tol);
      check_near(gpu.dv, cpu.dv, tol);
    }
  }
}

TEST_CASE("attention: a routed call with dropout is refused in a CUDA graph capture") {
  RoutesGuard guard;
  cuda::set_lab_routes(cuda::parse_lab_routes("attention:1-:v3_tiled_fa1"));
  const Tensor q = random_f64({1, 7, 8}, 400).to(DType::f32).to(kGpu);
  // Warm up outside the capture: the route fuses it.
  CHECK(scaled_dot_product_attention(q.detach().requires_grad_(true), q, q, {.dropout_p = 0.5})
            .grad_fn()
            ->name() == "FusedAttentionBackward");
  cuda::CUDAGraph graph;
  Tensor out;
  CHECK_THROWS_WITH(
      graph.capture([&] { out = scaled_dot_product_attention(q, q, q, {.dropout_p = 0.5}); }),
      Catch::Contains("scaled_dot_product_attention") &&
          Catch::Contains("draws random numbers on the GPU"));
  // Without dropout the routed kernel is captured.
  cuda::CUDAGraph plain;
  plain.capture([&] { out = scaled_dot_product_attention(q, q, q); });
  plain.replay();
  CHECK(allclose(out.cpu(), scaled_dot_product_attention(q.cpu(), q.cpu(), q.cpu()), 1e-5, 1e-5));
}

TEST_CASE("attention: a lab route to version 0 or to no version of the attention lab is refused") {
  RoutesGuard guard;
  CHECK_THROWS_WITH(cuda::set_lab_routes(cuda::parse_lab_routes("attention:1-:v0_kiln_f32")),
                    Catch::Contains("version 0"));
  CHECK_THROWS_WITH(cuda::set_lab_routes(cuda::parse_lab_routes("attention:1-:v9_recompute")),
                    Catch::Contains("v9_recompute") && Catch::Contains("attention lab"));
  CHECK(cuda::lab_routes().empty());
  // A backward version is a route too: the backward of the calls a forward route takes.
  cuda::set_lab_routes(cuda::parse_lab_routes("attention:1-:v5_tiled"));
  CHECK(std::string(cuda::routed_attention_backward(7).name) == "v5_tiled");
  CHECK(cuda::routed_attention(DType::f32, 1, 7, 7, 8) == nullptr);
  cuda::set_lab_routes({});
  CHECK(std::string(cuda::routed_attention_backward(7).name) == "v1_recompute");
}
