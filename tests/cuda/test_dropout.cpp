// GPU dropout draws the CPU's Philox stream: one seed gives the same mask, output and gradient
// on either device, and the generator advances the same way.
#include <catch2/catch.hpp>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_gpu_parity;
using kiln::testing::kExact;
using kiln::testing::random_f64;

namespace {
const Device kGpu = Device::cuda(0);
}

TEST_CASE("cuda dropout: the same mask, output and gradient as the cpu for one seed") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    // 4099 elements: not a multiple of the four a Philox block draws.
    Tensor x = random_f64({4099}, 1, 0.5, 1.5).to(dtype);
    Tensor x_cpu = x.clone(), x_gpu = x.to(kGpu).detach();
    x_cpu.requires_grad_();
    x_gpu.requires_grad_();
    Generator g_cpu(1234), g_gpu(1234);
    Tensor y_cpu = dropout(x_cpu, 0.3, true, &g_cpu);
    Tensor y_gpu = dropout(x_gpu, 0.3, true, &g_gpu);
    check_gpu_parity(y_gpu, y_cpu, kExact);
    Tensor g = random_f64({4099}, 2).to(dtype);
    y_cpu.backward(g);
    y_gpu.backward(g.to(kGpu));
    check_gpu_parity(x_gpu.grad(), x_cpu.grad(), kExact);
    // Both generators took one offset: the next draw matches too.
    check_gpu_parity(rand({5}, DType::f32, kGpu, &g_gpu),
                     rand({5}, DType::f32, Device::cpu(), &g_cpu), kExact);
  }
}

TEST_CASE("cuda dropout: non-contiguous, empty, p = 0 and p = 1") {
  Tensor x = random_f64({6, 7}, 3, 0.5, 1.5).to(DType::f32).t();
  Generator g_cpu(5), g_gpu(5);
  check_gpu_parity(dropout(x.to(kGpu), 0.5, true, &g_gpu), dropout(x, 0.5, true, &g_cpu), kExact);
  Tensor e = zeros({0, 3}, DType::f32, kGpu);
  CHECK(dropout(e, 0.5, true).shape() == Shape{0, 3});
  check_gpu_parity(dropout(x.to(kGpu), 0.0, true), x, kExact);
  check_gpu_parity(dropout(x.to(kGpu), 1.0, true), zeros({7, 6}, DType::f32), kExact);
  CHECK(dropout(x.to(kGpu), 0.5, false).device().is_cuda());
}

TEST_CASE("cuda dropout: gradcheck in f64 through the GPU with a fixed seed", "[heavy]") {
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        Generator gen(9);  // the same mask on every evaluation
        return dropout(in[0].to(kGpu), 0.4, true, &gen).cpu();
      },
      {random_f64({3, 5}, 4)});
}
