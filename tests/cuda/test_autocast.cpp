// Autocast on the GPU: the same op-by-op policy and training-step checks as the CPU test
// (tests/support/autocast_check.cpp), and batch norm's 16-bit activations (read and written as
// they are on the GPU, converted to f32 on the CPU) against the CPU, forward and backward.
#include <catch2/catch.hpp>

#include "autocast_check.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;

namespace {
const Device kGpu = Device::cuda(0);
}  // namespace

TEST_CASE("gpu autocast: each op class runs in the policy's dtype") {
  testing::check_autocast_policy(kGpu, DType::f16);
  testing::check_autocast_policy(kGpu, DType::bf16);
}

TEST_CASE("gpu autocast: a training step keeps f32 weights and returns f32 gradients") {
  testing::check_autocast_training_step(kGpu, DType::f16);
  testing::check_autocast_training_step(kGpu, DType::bf16);
}

TEST_CASE("gpu autocast: batch norm on 16-bit activations with f32 parameters") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    const Tensor x = randn({8, 16, 7, 7}).to(dtype);
    const Tensor grad = randn({8, 16, 7, 7}).to(dtype);
    Tensor w = randn({16}).requires_grad_(), b = randn({16}).requires_grad_();
    Tensor mean_cpu = zeros({16}), var_cpu = ones({16});
    Tensor mean_gpu = mean_cpu.to(kGpu), var_gpu = var_cpu.to(kGpu);
    Tensor wg = w.detach().to(kGpu).requires_grad_(), bg = b.detach().to(kGpu).requires_grad_();
    Tensor xc = x.clone().requires_grad_(), xg = x.to(kGpu).requires_grad_();
    const Tensor yc = batch_norm(xc, mean_cpu, var_cpu, w, b, true);
    const Tensor yg = batch_norm(xg, mean_gpu, var_gpu, wg, bg, true);
    CHECK(yg.dtype() == dtype);
    testing::check_gpu_parity(yg, yc, testing::tolerance(dtype));
    testing::check_gpu_parity(mean_gpu, mean_cpu, testing::tolerance(DType::f32));
    testing::check_gpu_parity(var_gpu, var_cpu, testing::tolerance(DType::f32));
    yc.backward(grad);
    yg.backward(grad.to(kGpu));
    CHECK(xg.grad().dtype() == dtype);
    CHECK(wg.grad().dtype() == DType::f32);
    testing::check_gpu_parity(xg.grad(), xc.grad(), testing::gradient_tolerance(dtype));
    testing::check_gpu_parity(wg.grad(), w.grad(), testing::relative_to_largest(1e-5, w.grad()));
    testing::check_gpu_parity(bg.grad(), b.grad(), testing::relative_to_largest(1e-5, b.grad()));
  }
}
