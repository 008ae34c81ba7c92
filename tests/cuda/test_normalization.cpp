// GPU parity of batch_norm and layer_norm: forward, running statistics and backward on CUDA
// against the CPU on the same inputs, per dtype, plus gradchecks through the GPU. The 16-bit
// dtypes compute in f32 on both devices, so their tolerance is the dtype's rounding.
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_gpu_parity;
using kiln::testing::kExact;
using kiln::testing::random_f64;
using kiln::testing::relative_to_largest;
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
