// Attention on cuda:0 against the CPU: scaled_dot_product_attention (causal, masks) and
// nn::MultiheadAttention / TransformerEncoderLayer forward and backward, from the same weights.
// The composition's ops each have their own GPU kernels; this checks that they compose.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gradcheck.h"
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
