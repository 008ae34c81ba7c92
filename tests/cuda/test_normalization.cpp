// GPU parity of batch_norm and layer_norm: forward, running statistics and backward on CUDA
// against the CPU on the same inputs, per dtype, plus gradchecks through the GPU. The 16-bit
// dtypes compute in f32 on both devices, so their tolerance is the dtype's rounding. Then the
// fused batch_norm_add_relu, the ResNet blocks that end with it, and the GPU's batch-norm passes
// called through the kernel table in both layouts (channels-last has no op of its own yet).
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradcheck.h"
#include "kiln/kernels/normalization.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::check_gpu_parity;
using kiln::testing::kExact;
using kiln::testing::random_f64;
using kiln::testing::relative_to_largest;
using kiln::testing::Tolerance;
using kiln::testing::tolerance;

namespace {

const Device kGpu = Device::cuda(0);

Tensor leaf(const Tensor& t, Device device) {
  Tensor out = t.detach().to(device).detach();
  out.requires_grad_();
  return out;
}

const DType kTrainingDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

struct BatchNormCase {
  Tensor x, weight, bias, running_mean, running_var, grad;
};

// Inputs with a mean far from zero, so a one-pass variance would show.
BatchNormCase batch_norm_case(const Shape& shape, DType dtype, uint64_t seed, bool affine) {
  const int64_t channels = shape[1];
  BatchNormCase c;
  c.x = add(random_f64(shape, seed, -2.0, 2.0), 3.0).to(dtype);
  if (affine) {
    c.weight = random_f64({channels}, seed + 1, 0.5, 1.5).to(dtype);
    c.bias = random_f64({channels}, seed + 2).to(dtype);
  }
  c.running_mean = random_f64({channels}, seed + 3).to(dtype);
  c.running_var = random_f64({channels}, seed + 4, 0.5, 2.0).to(dtype);
  c.grad = random_f64(shape, seed + 5).to(dtype);
  return c;
}

// Runs batch_norm on both devices, then backward, and compares output, running statistics
// and every gradient. `layout` may make x non-contiguous (it is applied on both devices).
void check_batch_norm(const BatchNormCase& c, bool training,
                      const std::function<Tensor(const Tensor&)>& layout = nullptr) {
  const DType dtype = c.x.dtype();
  // The dtype's rtol, with atol rtol times the largest |cpu| (relative_to_largest): batch norm's
  // backward subtracts two sums of M terms, so values that cancel to near zero keep the absolute
  // error of the largest ones.
  const double rtol = tolerance(dtype).rtol;
  Tensor x_cpu = leaf(c.x, Device::cpu()), x_gpu = leaf(c.x, kGpu);
  Tensor w_cpu, w_gpu, b_cpu, b_gpu;
  if (c.weight.defined()) {
    w_cpu = leaf(c.weight, Device::cpu()), w_gpu = leaf(c.weight, kGpu);
    b_cpu = leaf(c.bias, Device::cpu()), b_gpu = leaf(c.bias, kGpu);
  }
  Tensor rm_cpu = c.running_mean.clone(), rv_cpu = c.running_var.clone();
  Tensor rm_gpu = c.running_mean.to(kGpu), rv_gpu = c.running_var.to(kGpu);
  Tensor in_cpu = layout ? layout(x_cpu) : x_cpu, in_gpu = layout ? layout(x_gpu) : x_gpu;
  Tensor y_cpu = batch_norm(in_cpu, rm_cpu, rv_cpu, w_cpu, b_cpu, training, 0.1, 1e-5);
  Tensor y_gpu = batch_norm(in_gpu, rm_gpu, rv_gpu, w_gpu, b_gpu, training, 0.1, 1e-5);
  check_gpu_parity(y_gpu, y_cpu, relative_to_largest(rtol, y_cpu));
  check_gpu_parity(rm_gpu, rm_cpu, relative_to_largest(rtol, rm_cpu));
  check_gpu_parity(rv_gpu, rv_cpu, relative_to_largest(rtol, rv_cpu));
  Tensor g = layout ? layout(c.grad) : c.grad;
  y_cpu.backward(g);
  y_gpu.backward(g.to(kGpu));
  check_gpu_parity(x_gpu.grad(), x_cpu.grad(), relative_to_largest(rtol, x_cpu.grad()));
  if (c.weight.defined()) {
    check_gpu_parity(w_gpu.grad(), w_cpu.grad(), relative_to_largest(rtol, w_cpu.grad()));
    check_gpu_parity(b_gpu.grad(), b_cpu.grad(), relative_to_largest(rtol, b_cpu.grad()));
  }
}

}  // namespace

TEST_CASE("cuda normalization: batch_norm training forward, running stats and backward") {
  for (DType dtype : kTrainingDTypes) {
    INFO(dtype_name(dtype));
    check_batch_norm(batch_norm_case({4, 3, 5, 6}, dtype, 10, true), true);
  }
}

TEST_CASE("cuda normalization: batch_norm inference forward and backward") {
  for (DType dtype : kTrainingDTypes) {
    INFO(dtype_name(dtype));
    check_batch_norm(batch_norm_case({4, 3, 5, 6}, dtype, 20, true), false);
  }
}

TEST_CASE("cuda normalization: batch_norm without affine parameters") {
  check_batch_norm(batch_norm_case({3, 4, 7}, DType::f32, 30, false), true);
  check_batch_norm(batch_norm_case({3, 4, 7}, DType::f64, 31, false), false);
}

TEST_CASE("cuda normalization: batch_norm on [N, C], wide and long spatial shapes") {
  // S = 1 walks the batch with every thread; S = 300 and 1 x 1000 channels walk the plane.
  check_batch_norm(batch_norm_case({1000, 2}, DType::f32, 40, true), true);
  check_batch_norm(batch_norm_case({5, 3, 300}, DType::f32, 41, true), true);
  check_batch_norm(batch_norm_case({64, 4, 33}, DType::f64, 42, true), true);
  check_batch_norm(batch_norm_case({2, 1000, 3}, DType::f32, 43, true), true);
}

TEST_CASE("cuda normalization: batch_norm on a non-contiguous (channels-last) input") {
  // x is stored [N, H, W, C] and permuted to [N, C, H, W] on both devices.
  BatchNormCase c = batch_norm_case({2, 5, 6, 3}, DType::f32, 50, true);
  const int64_t channels = 3;
  c.weight = random_f64({channels}, 51, 0.5, 1.5).to(DType::f32);
  c.bias = random_f64({channels}, 52).to(DType::f32);
  c.running_mean = random_f64({channels}, 53).to(DType::f32);
  c.running_var = random_f64({channels}, 54, 0.5, 2.0).to(DType::f32);
  auto channels_last = [](const Tensor& t) { return t.permute({0, 3, 1, 2}); };
  check_batch_norm(c, true, channels_last);
  check_batch_norm(c, false, channels_last);
}

TEST_CASE("cuda normalization: batch_norm on an empty batch keeps the running stats") {
  BatchNormCase c = batch_norm_case({0, 3, 4}, DType::f32, 60, true);
  Tensor rm = c.running_mean.to(kGpu), rv = c.running_var.to(kGpu);
  Tensor y = batch_norm(c.x.to(kGpu), rm, rv, c.weight.to(kGpu), c.bias.to(kGpu), true, 0.1, 1e-5);
  CHECK(y.shape() == Shape{0, 3, 4});
  check_gpu_parity(rm, c.running_mean, kExact);
  check_gpu_parity(rv, c.running_var, kExact);
}

TEST_CASE("cuda normalization: batch_norm gradcheck in f64 through the GPU", "[heavy]") {
  Tensor x = random_f64({3, 2, 4}, 70), w = random_f64({2}, 71, 0.5, 1.5), b = random_f64({2}, 72);
  for (bool training : {true, false}) {
    INFO("training " << training);
    Tensor rm = random_f64({2}, 73).to(kGpu), rv = random_f64({2}, 74, 0.5, 2.0).to(kGpu);
    CHECK_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          // Momentum 0 keeps the running statistics fixed across gradcheck's evaluations.
          return batch_norm(in[0].to(kGpu), rm, rv, in[1].to(kGpu), in[2].to(kGpu), training, 0.0,
                            1e-5)
              .cpu();
        },
        {x, w, b});
  }
}

namespace {

void check_layer_norm(const Tensor& x0, const Shape& normalized_shape, bool affine,
                      const std::function<Tensor(const Tensor&)>& layout = nullptr) {
  const DType dtype = x0.dtype();
  const double rtol = tolerance(dtype).rtol;  // relative to the largest |cpu|, as batch norm's
  Tensor x_cpu = leaf(x0, Device::cpu()), x_gpu = leaf(x0, kGpu);
  Tensor w_cpu, w_gpu, b_cpu, b_gpu;
  if (affine) {
    Tensor w = random_f64(normalized_shape, 81, 0.5, 1.5).to(dtype);
    Tensor b = random_f64(normalized_shape, 82).to(dtype);
    w_cpu = leaf(w, Device::cpu()), w_gpu = leaf(w, kGpu);
    b_cpu = leaf(b, Device::cpu()), b_gpu = leaf(b, kGpu);
  }
  Tensor in_cpu = layout ? layout(x_cpu) : x_cpu, in_gpu = layout ? layout(x_gpu) : x_gpu;
  Tensor y_cpu = layer_norm(in_cpu, normalized_shape, w_cpu, b_cpu, 1e-5);
  Tensor y_gpu = layer_norm(in_gpu, normalized_shape, w_gpu, b_gpu, 1e-5);
  check_gpu_parity(y_gpu, y_cpu, relative_to_largest(rtol, y_cpu));
  Tensor g = random_f64(y_cpu.shape(), 83).to(dtype);
  y_cpu.backward(g);
  y_gpu.backward(g.to(kGpu));
  check_gpu_parity(x_gpu.grad(), x_cpu.grad(), relative_to_largest(rtol, x_cpu.grad()));
  if (affine) {
    check_gpu_parity(w_gpu.grad(), w_cpu.grad(), relative_to_largest(rtol, w_cpu.grad()));
    check_gpu_parity(b_gpu.grad(), b_cpu.grad(), relative_to_largest(rtol, b_cpu.grad()));
  }
}

}  // namespace

TEST_CASE("cuda normalization: layer_norm forward and backward per dtype") {
  for (DType dtype : kTrainingDTypes) {
    INFO(dtype_name(dtype));
    check_layer_norm(add(random_f64({4, 5, 6}, 90), 2.0).to(dtype), {6}, true);
    check_layer_norm(random_f64({4, 3, 4}, 91).to(dtype), {3, 4}, true);
  }
}

TEST_CASE("cuda normalization: layer_norm without affine, with long rows") {
  check_layer_norm(random_f64({3, 1000}, 92).to(DType::f32), {1000}, false);
  check_layer_norm(random_f64({300, 7}, 93).to(DType::f64), {7}, true);
}

TEST_CASE("cuda normalization: layer_norm on a non-contiguous input") {
  auto transposed = [](const Tensor& t) { return t.transpose(0, 1); };
  check_layer_norm(random_f64({5, 4, 6}, 94).to(DType::f32), {6}, true, transposed);
}

TEST_CASE("cuda normalization: layer_norm on zero rows") {
  Tensor x = zeros({0, 6}, DType::f32, kGpu);
  Tensor y = layer_norm(x, {6}, Tensor(), Tensor(), 1e-5);
  CHECK(y.shape() == Shape{0, 6});
  CHECK(y.device().is_cuda());
}

TEST_CASE("cuda normalization: layer_norm gradcheck in f64 through the GPU", "[heavy]") {
  Tensor x = random_f64({3, 5}, 95), w = random_f64({5}, 96, 0.5, 1.5), b = random_f64({5}, 97);
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return layer_norm(in[0].to(kGpu), {5}, in[1].to(kGpu), in[2].to(kGpu), 1e-5).cpu();
      },
      {x, w, b});
}

TEST_CASE("gpu batch_norm_relu: the fused ReLU equals relu(batch_norm) forward and backward") {
  // The GPU's kernels fuse the ReLU (fuses_relu): the forward clamps in the apply pass and the
  // backward works the mask out again from x; against the two ops on the same GPU.
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    const Tensor x = randn({4, 8, 5, 5}).to(dtype).to(kGpu);
    const Tensor grad = randn({4, 8, 5, 5}).to(dtype).to(kGpu);
    const Tensor w = randn({8}).to(kGpu), b = randn({8}).to(kGpu);
    Tensor fused_x = leaf(x, kGpu), plain_x = leaf(x, kGpu);
    Tensor fused_w = leaf(w, kGpu), plain_w = leaf(w, kGpu);
    Tensor fused_b = leaf(b, kGpu), plain_b = leaf(b, kGpu);
    const Tensor fused = batch_norm_relu(fused_x, Tensor(), Tensor(), fused_w, fused_b, true);
    const Tensor plain = relu(batch_norm(plain_x, Tensor(), Tensor(), plain_w, plain_b, true));
    check_gpu_parity(fused, plain.cpu(), tolerance(dtype));
    fused.backward(grad);
    plain.backward(grad);
    check_gpu_parity(fused_x.grad(), plain_x.grad().cpu(), testing::gradient_tolerance(dtype));
    check_gpu_parity(fused_w.grad(), plain_w.grad().cpu(),
                     relative_to_largest(1e-4, plain_w.grad().cpu()));
    check_gpu_parity(fused_b.grad(), plain_b.grad().cpu(),
                     relative_to_largest(1e-4, plain_b.grad().cpu()));
  }
}

TEST_CASE("gpu batch_norm_relu: in 16 bits the gradient follows the stored output") {
  // A weight of the dtype's smallest positive value: y = x_hat * weight in f32 rounds to a stored
  // 0 wherever 0 < x_hat <= 0.5, and there relu(batch_norm(x)) passes no gradient.
  for (DType dtype : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    const float smallest = dtype == DType::f16 ? static_cast<float>(Half::from_bits(1))
                                               : static_cast<float>(BFloat16::from_bits(1));
    const Tensor x = randn({4, 3, 5, 6}).to(dtype).to(kGpu);
    const Tensor w = full({3}, smallest, dtype, kGpu), b = zeros({3}, dtype, kGpu);
    Tensor fused_x = leaf(x, kGpu), plain_x = leaf(x, kGpu);
    Tensor fused_w = leaf(w, kGpu), plain_w = leaf(w, kGpu);
    Tensor fused_b = leaf(b, kGpu), plain_b = leaf(b, kGpu);
    const Tensor fused = batch_norm_relu(fused_x, Tensor(), Tensor(), fused_w, fused_b, true);
    const Tensor plain = relu(batch_norm(plain_x, Tensor(), Tensor(), plain_w, plain_b, true));
    check_gpu_parity(fused, plain.cpu(), kExact);
    sum(fused).backward();
    sum(plain).backward();
    check_gpu_parity(fused_w.grad(), plain_w.grad().cpu(),
                     relative_to_largest(1e-3, plain_w.grad().cpu()));
    check_gpu_parity(fused_b.grad(), plain_b.grad().cpu(),
                     relative_to_largest(1e-3, plain_b.grad().cpu()));
  }
}

TEST_CASE("gpu batch_norm_add_relu: the fused pass equals relu(batch_norm(x) + residual)") {
  // One pass each way on the GPU against the three ops on the same GPU: output, running
  // statistics, and the gradients of x, weight, bias and the residual, training and inference.
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (bool training : {true, false}) {
      INFO(dtype_name(dtype) << (training ? " training" : " inference"));
      const Shape shape{4, 6, 5, 3};
      const Tensor x = add(random_f64(shape, 110, -2.0, 2.0), 3.0).to(dtype).to(kGpu);
      const Tensor r = random_f64(shape, 111, -1.5, 1.5).to(dtype).to(kGpu);
      const Tensor grad = random_f64(shape, 112).to(dtype).to(kGpu);
      const Tensor w = random_f64({6}, 113, 0.5, 1.5).to(kGpu), b = random_f64({6}, 114).to(kGpu);
      const Tensor rm = random_f64({6}, 115).to(kGpu), rv = random_f64({6}, 116, 0.5, 2.0).to(kGpu);
      Tensor fused_x = leaf(x, kGpu), plain_x = leaf(x, kGpu), fused_r = leaf(r, kGpu),
             plain_r = leaf(r, kGpu), fused_w = leaf(w, kGpu), plain_w = leaf(w, kGpu),
             fused_b = leaf(b, kGpu), plain_b = leaf(b, kGpu);
      Tensor fused_rm = rm.clone(), fused_rv = rv.clone(), plain_rm = rm.clone(),
             plain_rv = rv.clone();
      const Tensor fused =
          batch_norm_add_relu(fused_x, fused_r, fused_rm, fused_rv, fused_w, fused_b, training);
      const Tensor plain =
          relu(add(batch_norm(plain_x, plain_rm, plain_rv, plain_w, plain_b, training), plain_r));
      CHECK(fused.grad_fn()->name() == "BatchNormAddReluBackward");
      // The three ops round batch norm's output to the dtype before the add; the pass once.
      const Tolerance forward = tolerance(dtype).times(2.0);
      check_gpu_parity(fused, plain.cpu(), forward);
      check_gpu_parity(fused_rm, plain_rm.cpu(), relative_to_largest(1e-5, plain_rm.cpu()));
      check_gpu_parity(fused_rv, plain_rv.cpu(), relative_to_largest(1e-5, plain_rv.cpu()));
      fused.backward(grad);
      plain.backward(grad);
      check_gpu_parity(fused_r.grad(), plain_r.grad().cpu(), kExact);
      check_gpu_parity(
          fused_x.grad(), plain_x.grad().cpu(),
          relative_to_largest(testing::gradient_tolerance(dtype).rtol, plain_x.grad().cpu()));
      check_gpu_parity(fused_w.grad(), plain_w.grad().cpu(),
                       relative_to_largest(1e-4, plain_w.grad().cpu()));
      check_gpu_parity(fused_b.grad(), plain_b.grad().cpu(),
                       relative_to_largest(1e-4, plain_b.grad().cpu()));
    }
  }
}

TEST_CASE("gpu batch_norm_add_relu: gradcheck in f64 through the GPU", "[heavy]") {
  Tensor x = random_f64({3, 2, 4}, 120), r = random_f64({3, 2, 4}, 121);
  Tensor w = random_f64({2}, 122, 0.5, 1.5), b = random_f64({2}, 123);
  for (bool training : {true, false}) {
    INFO("training " << training);
    Tensor rm = random_f64({2}, 124).to(kGpu), rv = random_f64({2}, 125, 0.5, 2.0).to(kGpu);
    CHECK_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          // Momentum 0 keeps the running statistics fixed across gradcheck's evaluations.
          return batch_norm_add_relu(in[0].to(kGpu), in[1].to(kGpu), rm, rv, in[2].to(kGpu),
                                     in[3].to(kGpu), training, 0.0, 1e-5)
              .cpu();
        },
        {x, r, w, b});
  }
}

TEST_CASE(
    "gpu resnet blocks: a basic and a bottleneck block equal the CPU's, forward and backward") {
  // The blocks end with batch_norm_add_relu: fused on the GPU, the three ops on the CPU. Their
  // convolutions in f32, not TF32 (cuDNN's default), to compare with the CPU at f32's tolerance.
  const backends::Tf32Scope f32(false);
  manual_seed(130);
  auto basic = std::make_shared<nn::BasicBlock>(
      4, 6, 2,
      std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(4, 6, 1, nn::Conv2dOptions{.stride = 2, .bias = false}),
          std::make_shared<nn::BatchNorm2d>(6)}));
  auto bottleneck = std::make_shared<nn::Bottleneck>(8, 2, 1, nullptr);
  for (const std::shared_ptr<nn::Module>& block :
       std::vector<std::shared_ptr<nn::Module>>{basic, bottleneck}) {
    INFO(block->name());
    const int64_t in_channels = block == basic ? 4 : 8;
    const Tensor x = random_f64({3, in_channels, 7, 5}, 131).to(DType::f32);
    Tensor y_cpu = block->forward(leaf(x, Device::cpu()));
    std::vector<Tensor> cpu_grads;
    sum(mul(y_cpu, y_cpu)).backward();
    for (const Tensor& p : block->parameters()) cpu_grads.push_back(p.grad().clone());
    block->zero_grad();
    block->to(kGpu);
    Tensor y_gpu = block->forward(leaf(x, kGpu));
    sum(mul(y_gpu, y_gpu)).backward();
    check_gpu_parity(y_gpu, y_cpu, relative_to_largest(1e-5, y_cpu));
    // Every batch norm counted both batches, the GPU's inside its forward pass.
    for (const auto& [name, buffer] : block->named_buffers())
      if (name.find("num_batches_tracked") != std::string::npos)
        CHECK(buffer.cpu().item<int64_t>() == 2);
    const std::vector<Tensor> params = block->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      INFO("parameter " << i);
      check_gpu_parity(params[i].grad(), cpu_grads[i], relative_to_largest(1e-4, cpu_grads[i]));
    }
  }
}

// ---- the GPU's batch-norm passes at the kernel table, in both layouts ----

namespace {

enum class Epilogue { none, relu, residual };

struct PassCase {
  Tensor x, residual, grad, weight, bias, running_mean, running_var;  // x [N, C, H, W]
  bool training;
  Epilogue epilogue;
};

struct PassResults {
  Tensor out, mean, invstd, running_mean, running_var, grad_x, grad_residual, sum_g, sum_g_xhat;
};

// The case through NormalizationKernels::cuda's two passes with x, the residual and the gradient
// handed over in `layout` (channels_last: [N * H * W, C] copies), results brought back to NCHW.
PassResults run_passes(const PassCase& c, BatchNormLayout layout) {
  const int64_t n = c.x.size(0), channels = c.x.size(1), h = c.x.size(2), w = c.x.size(3);
  const bool last = layout == BatchNormLayout::channels_last;
  auto to_layout = [&](const Tensor& t) {
    return last ? t.permute({0, 2, 3, 1}).contiguous().view({n * h * w, channels})
                : t.contiguous().view({n, channels, h * w});
  };
  auto from_layout = [&](const Tensor& t) {
    return last ? t.view({n, h, w, channels}).permute({0, 3, 1, 2}).contiguous()
                : t.view({n, channels, h, w});
  };
  const DType stats = c.weight.dtype();
  BatchNormForwardPass f;
  f.x = to_layout(c.x);
  f.layout = layout;
  f.weight = c.weight, f.bias = c.bias;
  f.running_mean = c.running_mean.clone(), f.running_var = c.running_var.clone();
  if (c.epilogue == Epilogue::residual) f.residual = to_layout(c.residual);
  f.training = c.training, f.relu = c.epilogue != Epilogue::none;
  f.out = empty(f.x.shape(), f.x.dtype(), kGpu);
  f.mean = empty({channels}, stats, kGpu), f.invstd = empty({channels}, stats, kGpu);
  NormalizationKernels::cuda->batch_norm_forward_pass(f);
  BatchNormBackwardPass b;
  b.x = f.x, b.grad = to_layout(c.grad);
  b.layout = layout;
  b.mean = f.mean, b.invstd = f.invstd, b.weight = c.weight, b.bias = c.bias;
  if (c.epilogue == Epilogue::residual) b.output = f.out;
  b.relu = c.epilogue == Epilogue::relu;
  b.training = c.training;
  b.grad_x = empty(f.x.shape(), f.x.dtype(), kGpu);
  if (c.epilogue == Epilogue::residual) b.grad_residual = empty(f.x.shape(), f.x.dtype(), kGpu);
  b.sum_g = empty({channels}, stats, kGpu), b.sum_g_xhat = empty({channels}, stats, kGpu);
  NormalizationKernels::cuda->batch_norm_backward_pass(b);
  return {from_layout(f.out),
          f.mean,
          f.invstd,
          f.running_mean,
          f.running_var,
          from_layout(b.grad_x),
          b.grad_residual.defined() ? from_layout(b.grad_residual) : Tensor(),
          b.sum_g,
          b.sum_g_xhat};
}

// The same case through kiln's ops on the CPU in f64, from the same rounded values.
PassResults reference_passes(const PassCase& c) {
  auto f64_leaf = [](const Tensor& t) { return leaf(t.to(DType::f64), Device::cpu()); };
  Tensor x = f64_leaf(c.x), r = f64_leaf(c.residual), w = f64_leaf(c.weight), b = f64_leaf(c.bias);
  PassResults want;
  want.running_mean = c.running_mean.to(DType::f64).cpu();
  want.running_var = c.running_var.to(DType::f64).cpu();
  Tensor y = batch_norm(x, want.running_mean, want.running_var, w, b, c.training, 0.1, 1e-5);
  if (c.epilogue == Epilogue::residual) y = add(y, r);
  if (c.epilogue != Epilogue::none) y = relu(y);
  y.backward(c.grad.to(DType::f64).cpu());
  want.out = y.detach();
  want.grad_x = x.grad();
  want.grad_residual = c.epilogue == Epilogue::residual ? r.grad() : Tensor();
  want.sum_g = b.grad();
  want.sum_g_xhat = w.grad();
  return want;
}

void check_close_to(const Tensor& got, const Tensor& want, double rtol) {
  check_close(got.to(DType::f64), want, relative_to_largest(rtol, want));
}

}  // namespace

TEST_CASE("gpu batch norm passes: both layouts against the CPU in f64, each dtype and epilogue") {
  // [N, C, H, W]: odd sizes; one channel over several blocks (its 4 x 320 values split on every
  // device); 1x1 spatial; 40 channels, two channels-last tiles of 32 with a ragged last one.
  const Shape shapes[] = {{2, 3, 5, 7}, {4, 1, 16, 20}, {33, 5, 1, 1}, {3, 40, 2, 3}};
  const std::pair<bool, Epilogue> modes[] = {{true, Epilogue::none},
                                             {true, Epilogue::relu},
                                             {true, Epilogue::residual},
                                             {false, Epilogue::relu},
                                             {false, Epilogue::residual}};
  uint64_t seed = 140;
  for (DType dtype : kTrainingDTypes) {
    const DType stats = dtype == DType::f64 ? DType::f64 : DType::f32;
    // Relative to the largest value, as check_batch_norm: the backward cancels sums of M terms.
    const double rtol = tolerance(dtype).rtol;
    for (const Shape& shape : shapes) {
      const int64_t channels = shape[1];
      for (auto [training, epilogue] : modes) {
        seed += 10;
        PassCase c{add(random_f64(shape, seed, -2.0, 2.0), 3.0).to(dtype).to(kGpu),
                   random_f64(shape, seed + 1, -1.5, 1.5).to(dtype).to(kGpu),
                   random_f64(shape, seed + 2).to(dtype).to(kGpu),
                   random_f64({channels}, seed + 3, 0.5, 1.5).to(stats).to(kGpu),
                   random_f64({channels}, seed + 4).to(stats).to(kGpu),
                   random_f64({channels}, seed + 5).to(stats).to(kGpu),
                   random_f64({channels}, seed + 6, 0.5, 2.0).to(stats).to(kGpu),
                   training,
                   epilogue};
        const PassResults want = reference_passes(c);
        for (BatchNormLayout layout :
             {BatchNormLayout::channels_first, BatchNormLayout::channels_last}) {
          INFO(dtype_name(dtype) << " " << shape_str(shape) << (training ? " training" : "")
                                 << " epilogue " << static_cast<int>(epilogue) << " layout "
                                 << static_cast<int>(layout));
          const PassResults got = run_passes(c, layout);
          CHECK(got.out.dtype() == dtype);
          check_close_to(got.out, want.out, rtol);
          check_close_to(got.running_mean, want.running_mean, rtol);
          check_close_to(got.running_var, want.running_var, rtol);
          check_close_to(got.grad_x, want.grad_x, rtol);
          check_close_to(got.sum_g, want.sum_g, rtol);
          check_close_to(got.sum_g_xhat, want.sum_g_xhat, rtol);
          if (epilogue == Epilogue::residual)
            check_close_to(got.grad_residual, want.grad_residual, rtol);
        }
      }
    }
  }
}
