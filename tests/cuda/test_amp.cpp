// The GPU's fused unscale-and-check (kernels/cuda/amp.cu) against the CPU's: the same unscaled
// values bit for bit and the same flag, over a list long enough to take several launches, with
// empty, one-element and multi-million-element gradients of every floating dtype; and GradScaler
// steps on GPU parameters.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "gradcheck.h"
#include "kiln/kernels/amp.h"
#include "kiln/kiln.h"
#include "kiln/optim/grad_scaler.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_gpu_parity;
using kiln::testing::kExact;
using kiln::testing::random_f64;
using kiln::testing::tolerance;

namespace {

const Device kGpu = Device::cuda(0);
constexpr double kInf = std::numeric_limits<double>::infinity();

// 120 gradients: sizes cycle through 0, 1, 1000, 3 million and two odd ones (a chunk's tail),
// dtypes through f32, f64, f16 and bf16, values up to 1000 so that the f16 products round. 105
// of them are not empty: more than one launch takes (96), so gradient 110 is the first of the
// second launch. The first five of the 3-million slot (3, 11, 19, 27, 35) cover every dtype; the
// later ones take 30011 elements (8 chunks), which keeps the simulator's run to a third.
std::vector<Tensor> mixed_grads() {
  const std::vector<int64_t> sizes = {0, 1, 1000, 3000000, 17, 4099, 1, 1000};
  const std::vector<DType> dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::f32};
  std::vector<Tensor> grads;
  for (size_t i = 0; i < 120; ++i) {
    const int64_t slot = sizes[i % sizes.size()];
    const int64_t n = i >= 40 && slot == 3000000 ? 30011 : slot;
    grads.push_back(random_f64({n}, 100 + i, -1000.0, 1000.0).to(dtypes[i % dtypes.size()]));
  }
  return grads;
}

// Runs the kernel on a copy of grads on each device and compares values and flags.
void check_against_cpu(const std::vector<Tensor>& grads, double inv_scale, double initial_flag) {
  std::vector<Tensor> cpu, gpu;
  for (const Tensor& g : grads) {
    cpu.push_back(g.clone());
    gpu.push_back(g.to(kGpu));
  }
  Tensor cpu_flag = full({1}, initial_flag), gpu_flag = full({1}, initial_flag, DType::f32, kGpu);
  AmpKernels::cpu.unscale_and_check(cpu, inv_scale, cpu_flag);
  AmpKernels::cuda->unscale_and_check(gpu, inv_scale, gpu_flag);
  CHECK(gpu_flag.item<double>() == cpu_flag.item<double>());
  for (size_t i = 0; i < grads.size(); ++i) {
    INFO("gradient " << i << ", " << describe(grads[i]));
    // NaN compares unequal to itself: compared as parity does, NaN where NaN.
    check_gpu_parity(gpu[i], cpu[i], kExact);
  }
}

}  // namespace

TEST_CASE("cuda amp: unscale_and_check matches the cpu on 120 mixed gradients") {
  REQUIRE(AmpKernels::cuda != nullptr);
  const std::vector<Tensor> clean = mixed_grads();
  for (double inv_scale : {1.0 / 65536, 1.0 / 3, 1.0}) {
    INFO("inv_scale " << inv_scale);
    check_against_cpu(clean, inv_scale, 0.0);
  }
  // A raised flag stays raised over clean gradients.
  check_against_cpu(clean, 0.5, 1.0);

  // One bad element: at the end of a 3-million-element gradient, in a one-element one, in the
  // second launch's first gradient; as inf, -inf and NaN.
  for (double bad : {kInf, -kInf, std::numeric_limits<double>::quiet_NaN()}) {
    for (size_t which : {size_t{3}, size_t{1}, size_t{110}}) {
      INFO("value " << bad << " in gradient " << which);
      std::vector<Tensor> grads = clean;
      grads[which] = clean[which].clone();
      Tensor& g = grads[which];
      REQUIRE(g.numel() > 0);
      g.narrow(0, g.numel() - 1, 1).fill_(bad);
      check_against_cpu(grads, 1.0 / 1024, 0.0);
    }
  }
}

TEST_CASE("cuda amp: hundreds of tiny gradients and an empty list") {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < 300; ++i) grads.push_back(random_f64({1 + int64_t(i % 5)}, i));
  check_against_cpu(grads, 0.25, 0.0);
  grads[299].fill_(kInf);
  check_against_cpu(grads, 0.25, 0.0);
  Tensor flag = zeros({1}, DType::f32, kGpu);
  AmpKernels::cuda->unscale_and_check({}, 0.5, flag);
  CHECK(flag.item<double>() == 0.0);
}

TEST_CASE("cuda amp: GradScaler steps GPU parameters as the cpu does, and skips overflows") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tensor w0 = random_f64({3, 2}, 1).to(dtype), x0 = random_f64({4, 3}, 2).to(dtype);
    Tensor w_cpu = w0.clone(), w_gpu = w0.to(kGpu);
    w_cpu.requires_grad_();
    w_gpu.requires_grad_();
    optim::SGD sgd_cpu({w_cpu}, {.lr = 0.1, .momentum = 0.9}),
        sgd_gpu({w_gpu}, {.lr = 0.1, .momentum = 0.9});
    optim::GradScaler scaler_cpu({.init_scale = 1024.0}), scaler_gpu({.init_scale = 1024.0});
    auto iteration = [](Tensor& w, const Tensor& x, optim::SGD& sgd, optim::GradScaler& scaler,
                        bool overflow) {
      sgd.zero_grad();
      scaler.scale(sum(square(matmul(x, w)))).backward();
      if (overflow) {
        NoGradGuard no_grad;
        w.grad().narrow(0, 1, 1).fill_(kInf);
      }
      CHECK(scaler.step(sgd) == !overflow);
      scaler.update();
    };
    for (int step = 0; step < 4; ++step) {
      iteration(w_cpu, x0, sgd_cpu, scaler_cpu, step == 2);
      iteration(w_gpu, x0.to(kGpu), sgd_gpu, scaler_gpu, step == 2);
      CHECK(scaler_gpu.get_scale() == scaler_cpu.get_scale());
      check_gpu_parity(w_gpu, w_cpu, tolerance(dtype));
    }
    CHECK(scaler_gpu.get_scale() == 512.0);
  }
}

TEST_CASE("cuda amp: an optimizer over cpu and gpu parameters checks each device") {
  Tensor a = ones({2}, DType::f32, kGpu), b = ones({2});
  a.requires_grad_();
  b.requires_grad_();
  optim::SGD sgd({a, b}, {.lr = 0.5});
  optim::GradScaler scaler({.init_scale = 8.0});
  scaler.scale(add(sum(a).cpu(), sum(b))).backward();
  {
    NoGradGuard no_grad;
    b.grad().fill_(kInf);  // only the cpu gradient overflows
  }
  CHECK_FALSE(scaler.step(sgd));
  scaler.update();
  CHECK(a.cpu().tolist() == std::vector<double>{1.0, 1.0});
  CHECK(scaler.get_scale() == 4.0);

  sgd.zero_grad();
  scaler.scale(add(sum(a).cpu(), sum(b))).backward();
  CHECK(scaler.step(sgd));
  scaler.update();
  CHECK(a.cpu().tolist() == std::vector<double>{0.5, 0.5});
  CHECK(b.tolist() == std::vector<double>{0.5, 0.5});
}
