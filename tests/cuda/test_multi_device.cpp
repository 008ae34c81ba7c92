// Ops on a tensor of cuda:1 while cuda:0 is current (a second GPU is needed; with one the cases
// say so and return): every kernel family runs on the tensor's GPU (the device switch makes it
// current, ops/dispatch.h), reads back its own results in order (nll_loss's and the index bounds
// check's host reads), gives the CPU's answer, and leaves cuda:0 current.
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kiln/core/cuda.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_gpu_parity;
using kiln::testing::composed_tolerance;
using kiln::testing::kExact;
using kiln::testing::random_f64;
using kiln::testing::Tolerance;

namespace {

const Device kSecond = Device::cuda(1);

bool have_two_gpus() {
  if (cuda::device_count() >= 2) return true;
  WARN("one GPU visible: ops on a second GPU are not checked");
  return false;
}

// f of x on the CPU and on cuda:1 with cuda:0 current, forward and (for a floating output) backward
// from one random gradient.
void check_on_second_gpu(const std::string& name, const std::function<Tensor(const Tensor&)>& f,
                         const Tensor& x, Tolerance tol) {
  INFO(name);
  cuda::set_device(0);
  const bool differentiable = is_floating(x.dtype());
  Tensor xc = x.detach().clone(), xg = x.detach().to(kSecond);
  if (differentiable) xc.requires_grad_(), xg.requires_grad_();
  Tensor yc = f(xc), yg = f(xg);
  CHECK(yg.device() == kSecond);
  check_gpu_parity(yg, yc, tol);
  if (differentiable && is_floating(yc.dtype()) && yc.requires_grad()) {
    Tensor g = random_f64(yc.shape(), 7).to(yc.dtype());
    yc.backward(g);
    yg.backward(g.to(kSecond));
    check_gpu_parity(xg.grad(), xc.grad(), tol);
  }
  CHECK(cuda::current_device() == 0);
}

// The same tensor on whichever device x is on.
Tensor like(const Tensor& t, const Tensor& x) {
  return t.to(x.device());
}

}  // namespace

TEST_CASE("multi device: every kernel family runs on its tensor's GPU") {
  if (!have_two_gpus()) return;
  const Tolerance tol = composed_tolerance(DType::f32);
  const Tensor rows = random_f64({6, 40}, 1).to(DType::f32);
  const Tensor images = random_f64({2, 3, 9, 8}, 2).to(DType::f32);
  const Tensor target = tensor<int64_t>({3, 0, 39, 7, 12, 5});
  const Tensor index = tensor<int64_t>({4, 0, 4, 2});

  check_on_second_gpu(
      "sum", [](const Tensor& x) { return sum(x, {1}); }, rows, tol);
  check_on_second_gpu(
      "max", [](const Tensor& x) { return max(x, 1).values; }, rows, kExact);
  check_on_second_gpu(
      "argmax", [](const Tensor& x) { return max(x, 1).indices; }, rows, kExact);
  check_on_second_gpu(
      "softmax", [](const Tensor& x) { return softmax(x, 1); }, rows, tol);
  check_on_second_gpu(
      "log_softmax", [](const Tensor& x) { return log_softmax(x, 1); }, rows, tol);
  check_on_second_gpu(
      "cross_entropy",
      [&](const Tensor& x) {
        return cross_entropy(x, like(target, x), Tensor(), -100, Reduction::mean, 0.1);
      },
      rows, tol);
  check_on_second_gpu(
      "nll_loss", [&](const Tensor& x) { return nll_loss(log_softmax(x, 1), like(target, x)); },
      rows, tol);
  check_on_second_gpu(
      "batch_norm_relu",
      [](const Tensor& x) {
        return batch_norm_relu(x, zeros({3}, DType::f32, x.device()),
                               ones({3}, DType::f32, x.device()), Tensor(), Tensor(), true);
      },
      images, tol);
  check_on_second_gpu(
      "layer_norm", [](const Tensor& x) { return layer_norm(x, {40}); }, rows, tol);
  check_on_second_gpu(
      "cumsum", [](const Tensor& x) { return cumsum(x, 1); }, rows, tol);
  check_on_second_gpu(
      "index_select", [&](const Tensor& x) { return index_select(x, 0, like(index, x)); }, rows,
      kExact);
  check_on_second_gpu(
      "gather",
      [&](const Tensor& x) {
        return gather(x, 1, like(target.view({6, 1}), x));
      },
      rows, kExact);
  check_on_second_gpu(
      "scatter_add",
      [&](const Tensor& x) {
        return scatter_add(zeros({6, 40}, DType::f32, x.device()), 1, like(target.view({6, 1}), x),
                           x.narrow(1, 0, 1));
      },
      rows, tol);
  check_on_second_gpu(
      "cat",
      [](const Tensor& x) {
        return cat({x, x}, 1);
      },
      rows, kExact);
  check_on_second_gpu(
      "max_pool2d",
      [](const Tensor& x) {
        return max_pool2d(x, {2, 2});
      },
      images, kExact);
  check_on_second_gpu(
      "avg_pool2d",
      [](const Tensor& x) {
        return avg_pool2d(x, {3, 2});
      },
      images, tol);
  check_on_second_gpu(
      "adaptive_avg_pool2d",
      [](const Tensor& x) {
        return adaptive_avg_pool2d(x, {4, 3});
      },
      images, tol);
  check_on_second_gpu(
      "dropout",
      [](const Tensor& x) {
        Generator generator(11);
        return dropout(x, 0.3, true, &generator);
      },
      rows, kExact);
  check_on_second_gpu(
      "one_hot", [](const Tensor& x) { return one_hot(x, 40); }, target, kExact);
}

TEST_CASE("multi device: random draws and host reads on the second GPU") {
  if (!have_two_gpus()) return;
  cuda::set_device(0);
  Generator on_cpu(5), on_gpu(5);
  check_gpu_parity(rand({1000}, DType::f32, kSecond, &on_gpu),
                   rand({1000}, DType::f32, Device::cpu(), &on_cpu), kExact);
  // The bounds check reads its answer back on the index's device: an out-of-range index is found.
  Tensor x = zeros({4, 3}, DType::f32, kSecond);
  CHECK_THROWS_AS(index_select(x, 0, tensor<int64_t>({1, 4}).to(kSecond)), IndexError);
  // nll_loss's target scan reads back too: a bad target is reported, not passed to the kernel.
  CHECK_THROWS_AS(nll_loss(zeros({2, 3}, DType::f32, kSecond), tensor<int64_t>({0, 3}).to(kSecond)),
                  IndexError);
  CHECK(cuda::current_device() == 0);
}
