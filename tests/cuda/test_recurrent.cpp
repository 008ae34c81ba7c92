// LSTM and GRU on cuda:0 against the CPU, forward and backward from the same weights: the
// composition's ops (linear, sigmoid, tanh, chunk, stack) each have their GPU kernels; this checks
// that they compose through time, and the same with the fused cells on the GPU
// (backends::set_fused_rnn_cell_on_gpu, off by default there; the CPU runs its fused cells).
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using kiln::testing::random_f64;

TEST_CASE("recurrent: a bidirectional two-layer LSTM and GRU on the GPU equal the CPU's") {
  const bool was_fused = backends::fused_rnn_cell_on_gpu();
  for (const bool fused_on_gpu : {false, true})
    for (const bool lstm : {true, false}) {
      INFO((lstm ? "LSTM" : "GRU")
           << (fused_on_gpu ? ", fused cells on the GPU" : ", composed on the GPU"));
      backends::set_fused_rnn_cell_on_gpu(fused_on_gpu);
      manual_seed(5);
      const nn::RNNOptions options{.num_layers = 2, .batch_first = true, .bidirectional = true};
      std::shared_ptr<nn::Module> cpu, gpu;
      if (lstm) {
        cpu = std::make_shared<nn::LSTM>(3, 4, options);
        gpu = std::make_shared<nn::LSTM>(3, 4, options);
      } else {
        cpu = std::make_shared<nn::GRU>(3, 4, options);
        gpu = std::make_shared<nn::GRU>(3, 4, options);
      }
      cpu->to(DType::f64);
      gpu->to(DType::f64);
      gpu->load_state_dict(cpu->state_dict());
      gpu->to(Device::cuda(0));
      const Tensor x = random_f64({2, 5, 3}, 11);
      Tensor xc = x.detach().requires_grad_(true), xg = x.to(Device::cuda(0)).requires_grad_(true);
      const Tensor yc = cpu->forward(xc), yg = gpu->forward(xg);
      mul(yc, yc).sum().backward();
      mul(yg, yg).sum().backward();
      CHECK(allclose(yg.cpu(), yc, 1e-12, 1e-12));
      CHECK(allclose(xg.grad().cpu(), xc.grad(), 1e-12, 1e-12));
      const auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
      for (size_t i = 0; i < pc.size(); ++i) {
        INFO(pc[i].first);
        CHECK(allclose(pg[i].second.grad().cpu(), pc[i].second.grad(), 1e-12, 1e-12));
      }
    }
  backends::set_fused_rnn_cell_on_gpu(was_fused);
}
