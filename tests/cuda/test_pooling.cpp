// GPU parity of max_pool2d, avg_pool2d and adaptive_avg_pool2d: values, indices (the same tie
// and NaN rule) and gradients on CUDA against the CPU on the same inputs, per dtype, plus
// gradchecks through the GPU.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_gpu_parity;
using kiln::testing::kExact;
using kiln::testing::random_f64;
using kiln::testing::Tolerance;
using kiln::testing::tolerance;

namespace {

const Device kGpu = Device::cuda(0);
const DType kTrainingDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

Tensor leaf(const Tensor& t, Device device) {
  Tensor out = t.detach().to(device).detach();
  out.requires_grad_();
  return out;
}

// Runs `op` on both devices from the same input, compares the outputs, then backward from the
// same random gradient and compares the input gradients.
void check_op(const Tensor& x, const std::function<Tensor(const Tensor&)>& op,
              const std::function<Tensor(const Tensor&)>& layout = nullptr) {
  const Tolerance tol = tolerance(x.dtype());
  Tensor x_cpu = leaf(x, Device::cpu()), x_gpu = leaf(x, kGpu);
  Tensor y_cpu = op(layout ? layout(x_cpu) : x_cpu);
  Tensor y_gpu = op(layout ? layout(x_gpu) : x_gpu);
  check_gpu_parity(y_gpu, y_cpu, tol);
  Tensor g = random_f64(y_cpu.shape(), 7).to(x.dtype());
  y_cpu.backward(g);
  y_gpu.backward(g.to(kGpu));
  check_gpu_parity(x_gpu.grad(), x_cpu.grad(), tol);
}

// Values from {0, 1, 2} (truncated): many ties inside each window.
Tensor tied(const Shape& shape, uint64_t seed) {
  return random_f64(shape, seed, 0.0, 3.0).to(DType::i64).to(DType::f64);
}

// 0, 0.1, ..., (n - 1) / 10 in a scrambled order: 37 is prime to the sizes used here.
Tensor distinct(const Shape& shape) {
  const int64_t n = shape_numel(shape);
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    values[static_cast<size_t>(i)] = static_cast<double>((i * 37) % n) / 10.0;
  return tensor(values, shape);
}

}  // namespace

TEST_CASE("cuda pooling: max_pool2d values, indices and gradients per dtype") {
  for (DType dtype : kTrainingDTypes) {
    INFO(dtype_name(dtype));
    Tensor x = random_f64({2, 3, 9, 11}, 1).to(dtype);
    check_op(x, [](const Tensor& t) { return max_pool2d(t, {3, 3}, {2, 2}, {1, 1}); });
    check_op(x, [](const Tensor& t) { return max_pool2d(t, {2, 3}, {1, 2}, {1, 0}, {2, 1}); });
    check_op(x, [](const Tensor& t) {
      return max_pool2d(t, {3, 3}, {2, 2}, {0, 0}, {1, 1}, true);
    });
  }
}

TEST_CASE("cuda pooling: max_pool2d picks the cpu's index among ties and NaNs") {
  Tensor x = tied({2, 2, 8, 8}, 2);
  // NaNs win over every number; two of them in one window pick the same one as the CPU.
  Tensor flat = x.view({-1});
  flat.select(0, 5).fill_(std::numeric_limits<double>::quiet_NaN());
  flat.select(0, 6).fill_(std::numeric_limits<double>::quiet_NaN());
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor xd = x.to(dtype);
    MaxPool2dResult cpu = max_pool2d_with_indices(xd, {3, 3}, {1, 1}, {1, 1});
    MaxPool2dResult gpu = max_pool2d_with_indices(xd.to(kGpu), {3, 3}, {1, 1}, {1, 1});
    check_gpu_parity(gpu.indices, cpu.indices, kExact);
    check_gpu_parity(gpu.values, cpu.values, kExact);
    // Overlapping windows share maxima, so the backward adds several gradients into one input.
    Tensor g = random_f64(cpu.values.shape(), 3).to(dtype);
    Shape input_shape = xd.shape();
    check_gpu_parity(max_pool2d_backward(g.to(kGpu), gpu.indices, input_shape),
                     max_pool2d_backward(g, cpu.indices, input_shape), tolerance(dtype));
  }
}

TEST_CASE("cuda pooling: avg_pool2d with and without counting the padding") {
  for (DType dtype : kTrainingDTypes) {
    INFO(dtype_name(dtype));
    Tensor x = random_f64({2, 3, 9, 10}, 4).to(dtype);
    for (bool include_pad : {true, false}) {
      INFO("count_include_pad " << include_pad);
      check_op(x, [&](const Tensor& t) {
        return avg_pool2d(t, {3, 3}, {2, 2}, {1, 1}, false, include_pad);
      });
      check_op(x, [&](const Tensor& t) {
        return avg_pool2d(t, {4, 3}, {3, 2}, {2, 1}, true, include_pad);
      });
      check_op(x, [&](const Tensor& t) {
        return avg_pool2d(t, {3, 3}, {1, 1}, {1, 1}, false, include_pad);
      });
    }
  }
}

TEST_CASE("cuda pooling: adaptive_avg_pool2d down, up and global") {
  for (DType dtype : kTrainingDTypes) {
    INFO(dtype_name(dtype));
    Tensor x = random_f64({2, 3, 7, 11}, 5).to(dtype);
    check_op(x, [](const Tensor& t) { return adaptive_avg_pool2d(t, {3, 5}); });
    check_op(x, [](const Tensor& t) { return adaptive_avg_pool2d(t, {1, 1}); });
    // More cells than inputs: the windows overlap.
    check_op(x, [](const Tensor& t) { return adaptive_avg_pool2d(t, {10, 14}); });
  }
}

TEST_CASE("cuda pooling: non-contiguous, 3-D and empty-batch inputs") {
  Tensor x = random_f64({2, 8, 9, 3}, 6).to(DType::f32);
  auto channels_last = [](const Tensor& t) { return t.permute({0, 3, 1, 2}); };
  check_op(
      x,
      [](const Tensor& t) {
        return max_pool2d(t, {2, 2});
      },
      channels_last);
  check_op(
      x,
      [](const Tensor& t) {
        return avg_pool2d(t, {3, 3}, {2, 2}, {1, 1});
      },
      channels_last);
  check_op(
      x,
      [](const Tensor& t) {
        return adaptive_avg_pool2d(t, {4, 4});
      },
      channels_last);

  Tensor chw = random_f64({3, 6, 7}, 8).to(DType::f32);
  check_op(chw, [](const Tensor& t) { return max_pool2d(t, {2, 2}); });
  check_op(chw, [](const Tensor& t) { return avg_pool2d(t, {2, 3}); });
  check_op(chw, [](const Tensor& t) { return adaptive_avg_pool2d(t, {2, 3}); });

  Tensor empty_batch = zeros({0, 3, 6, 6}, DType::f32, kGpu);
  CHECK(max_pool2d(empty_batch, {2, 2}).shape() == Shape{0, 3, 3, 3});
  CHECK(avg_pool2d(empty_batch, {2, 2}).shape() == Shape{0, 3, 3, 3});
  CHECK(adaptive_avg_pool2d(empty_batch, {2, 2}).shape() == Shape{0, 3, 2, 2});
  CHECK(adaptive_avg_pool2d(random_f64({1, 2, 3, 3}, 9).to(kGpu), {0, 0}).shape() ==
        Shape{1, 2, 0, 0});
}

TEST_CASE("cuda pooling: gradcheck in f64 through the GPU", "[heavy]") {
  // Distinct values keep max_pool2d's choice stable under gradcheck's perturbation.
  Tensor x = distinct({1, 2, 7, 8});
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return max_pool2d(in[0].to(kGpu), {3, 3}, {2, 2}, {1, 1}).cpu();
      },
      {x});
  Tensor y = random_f64({1, 2, 7, 8}, 10);
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return avg_pool2d(in[0].to(kGpu), {3, 3}, {2, 2}, {1, 1}, true, false).cpu();
      },
      {y});
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return adaptive_avg_pool2d(in[0].to(kGpu), {3, 5}).cpu();
      },
      {y});
}
