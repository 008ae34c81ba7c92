// The fused optimizer updates on the GPU (kernels/cuda/optim.cu) against the CPU's op-by-op
// update: 100 parameters (so SGD's 64 and Adam's 48 per launch are crossed), empty ones among
// them, a few steps, f32 and the 16-bit floats; and the first-step flags of momentum buffers that
// start in different steps. Each runs with the fused kernels switched on
// (backends::set_fused_optimizer_on_gpu) and with the default, op by op.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;

namespace {

const Device kGpu = Device::cuda(0);

std::vector<Tensor> make_params(DType dtype, Device device) {
  Generator gen(11);
  std::vector<Tensor> params;
  for (int i = 0; i < 100; ++i) {
    const int64_t n = i % 17 == 0 ? 0 : 1 + (i * 7919) % 20000;
    params.push_back(
        randn({n}, DType::f32, Device::cpu(), &gen).to(dtype).to(device).requires_grad_());
  }
  return params;
}

using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>, bool)>;

// The fused kernels on the GPU, or (their default there: they have not run on a GPU) op by op.
class FusedOnGpu {
 public:
  explicit FusedOnGpu(bool on) : previous_(backends::fused_optimizer_on_gpu()) {
    backends::set_fused_optimizer_on_gpu(on);
  }
  ~FusedOnGpu() { backends::set_fused_optimizer_on_gpu(previous_); }

 private:
  bool previous_;
};

void compare_once(const Make& make, DType dtype, int steps, bool skip_some_first);

void compare(const Make& make, DType dtype, int steps, bool skip_some_first) {
  for (const bool fused_kernels : {true, false}) {
    INFO((fused_kernels ? "fused kernels on the GPU" : "op by op on the GPU (the default)"));
    FusedOnGpu scope(fused_kernels);
    compare_once(make, dtype, steps, skip_some_first);
  }
}

void compare_once(const Make& make, DType dtype, int steps, bool skip_some_first) {
  std::vector<Tensor> gpu = make_params(dtype, kGpu), cpu = make_params(dtype, Device::cpu());
  auto fused = make(gpu, true), plain = make(cpu, false);
  for (int s = 0; s < steps; ++s) {
    Generator gen(50 + static_cast<uint64_t>(s));
    for (size_t i = 0; i < gpu.size(); ++i) {
      Tensor g = randn(cpu[i].shape(), DType::f32, Device::cpu(), &gen).to(dtype);
      // Every third parameter gets its first gradient at step 1: its buffer starts later.
      const bool skip = skip_some_first && s == 0 && i % 3 == 0;
      cpu[i].set_grad(skip ? Tensor() : g);
      gpu[i].set_grad(skip ? Tensor() : g.to(kGpu));
    }
    fused->step();
    plain->step();
  }
  const bool wide = dtype == DType::f32;
  for (size_t i = 0; i < gpu.size(); ++i) {
    INFO("parameter " << i << ", " << dtype_name(dtype));
    testing::check_gpu_parity(gpu[i].detach(), cpu[i].detach(),
                              testing::tolerance(dtype).times(wide ? 1.0 : 8.0));
  }
}

}  // namespace

TEST_CASE("gpu fused SGD against the CPU's op-by-op update") {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    compare(
        [](std::vector<Tensor> params, bool foreach) {
          return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1,
                                                                        .momentum = 0.9,
                                                                        .weight_decay = 5e-4,
                                                                        .nesterov = true,
                                                                        .foreach = foreach});
        },
        dtype, 3, true);
  }
}

TEST_CASE("gpu fused Adam and AdamW against the CPU's op-by-op update") {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (bool amsgrad : {false, true}) {
      compare(
          [&](std::vector<Tensor> params, bool foreach) {
            return std::make_unique<optim::Adam>(
                params,
                optim::AdamOptions{
                    .lr = 1e-2, .weight_decay = 1e-3, .amsgrad = amsgrad, .foreach = foreach});
          },
          dtype, 3, false);
      compare(
          [&](std::vector<Tensor> params, bool foreach) {
            return std::make_unique<optim::AdamW>(
                params, optim::AdamWOptions{.lr = 1e-2, .amsgrad = amsgrad, .foreach = foreach});
          },
          dtype, 3, true);
    }
  }
}

TEST_CASE("gpu clip_grad_norm_ against the CPU's, with gradients on the GPU and on both") {
  std::vector<Tensor> gpu = make_params(DType::f32, kGpu),
                      cpu = make_params(DType::f32, Device::cpu());
  Generator gen(70);
  for (size_t i = 0; i < gpu.size(); ++i) {
    Tensor g = randn(cpu[i].shape(), DType::f32, Device::cpu(), &gen);
    cpu[i].set_grad(g);
    gpu[i].set_grad(g.to(kGpu));
  }
  for (double norm_type : {2.0, 1.0, static_cast<double>(INFINITY)}) {
    INFO("norm_type " << norm_type);
    const double expected = optim::clip_grad_norm_(cpu, 1e9, norm_type);
    CHECK(optim::clip_grad_norm_(gpu, 1e9, norm_type) == Approx(expected).epsilon(1e-12));
  }
  // Half the gradients on each device: the norms meet on the first one's.
  std::vector<Tensor> mixed;
  for (size_t i = 0; i < gpu.size(); ++i) mixed.push_back(i % 2 ? gpu[i] : cpu[i]);
  const double total = optim::clip_grad_norm_(cpu, 1e9);
  CHECK(optim::clip_grad_norm_(mixed, 1e9) == Approx(total).epsilon(1e-12));
  // Clipping scales every gradient by the same factor on either device.
  optim::clip_grad_norm_(gpu, 1.0);
  optim::clip_grad_norm_(cpu, 1.0);
  for (size_t i = 0; i < gpu.size(); ++i)
    if (cpu[i].numel() > 0)
      CHECK(max(abs(sub(gpu[i].grad().to(Device::cpu()), cpu[i].grad()))).item<double>() < 1e-7);
}
