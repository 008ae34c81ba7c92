// GradScaler (optim/grad_scaler.h) and the unscale-and-check kernel (kernels/amp.h) on the CPU:
// skipped steps leave weights and optimizer state alone, the scale follows PyTorch's
// _amp_update_scale_ (a transcription of it, and PyTorch itself when
// tests/reference/grad_scaler_sequence.json is there), misuse is refused, and the scaler's state
// survives state_dict and training-checkpoint round trips.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gradcheck.h"
#include "kiln/kernels/amp.h"
#include "kiln/kiln.h"
#include "kiln/optim/grad_scaler.h"
#include "parity.h"
#include "reference_loops.h"
#include "temp_dir.h"
#include "torch_reference.h"

using namespace kiln;
using namespace kiln::optim;
using kiln::testing::check_close;
using kiln::testing::param;
using kiln::testing::random_f64;
using kiln::testing::relative_to_largest;
using kiln::testing::TempDir;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// p's gradient with element `index` (row-major) replaced by `value`: a gradient that overflowed.
void poison_grad(Tensor p, int64_t index, double value) {
  NoGradGuard no_grad;
  Tensor g = p.grad().clone();
  g.flatten().narrow(0, index, 1).fill_(value);
  p.set_grad(g);
}

// Every tensor of an optimizer's state, copied out.
std::map<std::string, std::vector<double>> snapshot(const Optimizer& optimizer) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [key, t] : optimizer.state_dict()) out[key] = t.tolist();
  return out;
}

// PyTorch's _amp_update_scale_cpu_kernel (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp),
// transcribed: an f32 scale, an int32 tracker, the factors as double.
struct ReferenceScaler {
  float scale;
  double growth_factor, backoff_factor;
  int32_t growth_interval;
  int32_t tracker = 0;

  void update(bool found_inf) {
    if (found_inf) {
      scale = static_cast<float>(scale * backoff_factor);
      tracker = 0;
      return;
    }
    const int32_t successful = tracker + 1;
    if (successful == growth_interval) {
      const float grown = static_cast<float>(scale * growth_factor);
      if (std::isfinite(grown)) scale = grown;
      tracker = 0;
    } else {
      tracker = successful;
    }
  }
};

// The run of tests/reference/grad_scaler_sequence.py: a Linear(3, 2) trained by SGD with momentum
// under a GradScaler, one character of a script per step ("." clean; "i", "m", "n": +inf, -inf or
// NaN written into weight.grad[0, 1] after backward).
struct ScriptedRun {
  nn::Linear model{3, 2};
  SGD sgd;
  GradScaler scaler;
  Tensor x;
  double loss_factor;
  bool clip;

  ScriptedRun(GradScalerOptions options, const std::vector<double>& weight,
              const std::vector<double>& bias, const std::vector<double>& inputs, double lr = 0.05,
              double momentum = 0.9, double loss_factor_ = 0.01, bool clip_ = false)
      : sgd(model.parameters(), {lr, momentum}),
        scaler(options),
        x(tensor(inputs).view({4, 3}).to(DType::f32)),
        loss_factor(loss_factor_),
        clip(clip_) {
    NoGradGuard no_grad;
    model.weight.copy_(tensor(weight).view({2, 3}));
    model.bias.copy_(tensor(bias));
  }

  // The inputs of the script's runs, sin waves as there.
  static std::vector<double> values(int n, double scale, double phase) {
    std::vector<double> v;
    for (int i = 0; i < n; ++i) v.push_back(scale * std::sin(0.7 * i + phase));
    return v;
  }
  explicit ScriptedRun(GradScalerOptions options)
      : ScriptedRun(options, values(6, 0.5, 0.1), values(2, 0.5, 1.3), values(12, 1.0, 0.7)) {}

  bool step(char c) {
    sgd.zero_grad();
    scaler.scale(mul(sum(square(model.forward(x))), loss_factor)).backward();
    if (c != '.') poison_grad(model.weight, 1, c == 'i' ? kInf : c == 'm' ? -kInf : kNaN);
    if (clip) {
      scaler.unscale_(sgd);
      clip_grad_norm_(model.parameters(), 0.05);
    }
    const bool stepped = scaler.step(sgd);
    scaler.update();
    return stepped;
  }
};

// A script of `n` steps that overflows in bursts: clean runs of up to max_clean - 1 steps (so the
// scale grows), single overflows and streaks of up to four, from a fixed linear congruential
// sequence.
std::string bursty_script(int n, uint32_t seed, uint32_t max_clean) {
  std::string s;
  uint32_t state = seed;
  const char poisons[] = {'i', 'm', 'n'};
  while (static_cast<int>(s.size()) < n) {
    state = state * 1664525u + 1013904223u;
    s.append((state >> 8) % max_clean, '.');
    const uint32_t streak = 1 + ((state >> 20) % 3 == 0 ? (state >> 24) % 4 : 0);
    for (uint32_t k = 0; k < streak; ++k) s.push_back(poisons[(state >> (4 + k)) % 3]);
  }
  s.resize(n);
  return s;
}

}  // namespace

// ---- the kernel ----

TEST_CASE("grad_scaler: the cpu kernel multiplies by the f32 inv_scale in each dtype") {
  const std::vector<double> values = {1.0, -2.5, 1000.0, 3e-3, -7.25e-4, 0.0, 65504.0, 1.0 / 3};
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (double inv_scale : {1.0 / 1024, 1.0 / 3, 1.0}) {
      INFO(dtype_name(dtype) << ", inv_scale " << inv_scale);
      Tensor g = tensor(values).to(dtype);
      const std::vector<double> before = g.tolist();
      // PyTorch's inv_scale is an f32 tensor: for f64 gradients the product is f64 with the f32
      // factor; for the others an f32 product rounded back.
      const float f = static_cast<float>(inv_scale);
      std::vector<double> want;
      for (double v : before) want.push_back(static_cast<double>(static_cast<float>(v) * f));
      Tensor want_t = tensor(want).to(DType::f32).to(dtype);
      if (dtype == DType::f64) {
        want.clear();
        for (double v : before) want.push_back(v * static_cast<double>(f));
        want_t = tensor(want);
      }
      Tensor found_inf = zeros({1});
      AmpKernels::cpu.unscale_and_check({g}, inv_scale, found_inf);
      CHECK(g.tolist() == want_t.tolist());
      CHECK(found_inf.item<double>() == 0.0);
    }
  }
}

TEST_CASE("grad_scaler: the cpu kernel flags inf and NaN anywhere in a mixed list") {
  // 100003 elements: past the OpenMP grain, so the flag is raised from a worker's chunk.
  for (double bad : {kInf, -kInf, kNaN}) {
    for (int64_t where : {int64_t{0}, int64_t{50000}, int64_t{100002}}) {
      INFO("value " << bad << " at " << where);
      std::vector<Tensor> grads = {random_f64({5}, 1).to(DType::f16), zeros({0}),
                                   random_f64({100003}, 2), random_f64({7}, 3).to(DType::bf16)};
      grads[2].narrow(0, where, 1).fill_(bad);
      Tensor found_inf = zeros({1});
      AmpKernels::cpu.unscale_and_check(grads, 0.5, found_inf);
      CHECK(found_inf.item<double>() == 1.0);
      // Every other element was still unscaled.
      CHECK(grads[3].tolist() == mul(random_f64({7}, 3).to(DType::bf16), 0.5).tolist());
    }
  }
  // A flag already raised stays raised: the kernel never clears it.
  Tensor found_inf = ones({1});
  AmpKernels::cpu.unscale_and_check({ones({3})}, 0.5, found_inf);
  CHECK(found_inf.item<double>() == 1.0);
}

// ---- steps ----

TEST_CASE("grad_scaler: an overflowing gradient skips the step and backs the scale off") {
  using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;
  const std::vector<std::pair<std::string, Make>> optimizers = {
      {"SGD with momentum",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(std::move(p), SGDOptions{.lr = 0.1, .momentum = 0.9});
       }},
      {"Adam", [](std::vector<Tensor> p) { return std::make_unique<Adam>(std::move(p)); }},
      {"AdamW amsgrad", [](std::vector<Tensor> p) {
         return std::make_unique<AdamW>(std::move(p), AdamWOptions{.amsgrad = true});
       }}};
  for (const auto& [name, make] : optimizers) {
    for (double bad : {kInf, -kInf, kNaN}) {
      INFO(name << ", gradient element " << bad);
      nn::Linear model(3, 2);
      const Tensor x = random_f64({4, 3}, 5).to(DType::f32);
      std::unique_ptr<Optimizer> optimizer = make(model.parameters());
      GradScaler scaler({.init_scale = 1024.0});
      auto iteration = [&](std::optional<double> poison) {
        optimizer->zero_grad();
        scaler.scale(sum(square(model.forward(x)))).backward();
        if (poison) poison_grad(model.bias, 1, *poison);
        const bool stepped = scaler.step(*optimizer);
        scaler.update();
        return stepped;
      };
      CHECK(iteration(std::nullopt));  // a clean step first: the optimizer has state to keep
      CHECK(scaler.get_scale() == 1024.0);
      CHECK(scaler.growth_tracker() == 1);
      const std::vector<double> weight = model.weight.tolist(), bias = model.bias.tolist();
      const auto state = snapshot(*optimizer);
      REQUIRE_FALSE(state.empty());

      CHECK_FALSE(iteration(bad));
      CHECK(scaler.get_scale() == 512.0);
      CHECK(scaler.growth_tracker() == 0);
      CHECK(model.weight.tolist() == weight);
      CHECK(model.bias.tolist() == bias);
      CHECK(snapshot(*optimizer) == state);

      CHECK(iteration(std::nullopt));  // and training goes on
      CHECK(model.weight.tolist() != weight);
      CHECK(scaler.get_scale() == 512.0);
    }
  }
}

TEST_CASE(
    "grad_scaler: capturable decides on the device what the host scaler decides, bit for bit") {
  // The same training run twice: the host scaler with plain optimizers, and the capturable scaler
  // (scale, tracker and skip in tensors, nothing read on the host) with capturable ones, whose
  // options and step counts are tensors; a scripted overflow in between, growth every 2 steps, and
  // a schedule changing lr and momentum (beta1) at every step.
  using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>, bool)>;
  const std::vector<std::pair<std::string, Make>> optimizers = {
      {"SGD, Nesterov, weight decay",
       [](std::vector<Tensor> p, bool capturable) {
         return std::make_unique<SGD>(std::move(p), SGDOptions{.lr = 0.1,
                                                               .momentum = 0.9,
                                                               .weight_decay = 0.01,
                                                               .nesterov = true,
                                                               .capturable = capturable});
       }},
      {"Adam",
       [](std::vector<Tensor> p, bool capturable) {
         return std::make_unique<Adam>(std::move(p),
                                       AdamOptions{.weight_decay = 0.1, .capturable = capturable});
       }},
      {"AdamW amsgrad", [](std::vector<Tensor> p, bool capturable) {
         return std::make_unique<AdamW>(std::move(p),
                                        AdamWOptions{.amsgrad = true, .capturable = capturable});
       }}};
  for (const auto& [name, make] : optimizers) {
    INFO(name);
    struct Run {
      std::unique_ptr<nn::Linear> model = std::make_unique<nn::Linear>(3, 2);
      std::unique_ptr<Optimizer> optimizer;
      std::unique_ptr<GradScaler> scaler;
      std::unique_ptr<OneCycleLR> schedule;
    };
    auto make_run = [&](bool capturable) {
      manual_seed(3);
      Run run;
      run.optimizer = make(run.model->parameters(), capturable);
      run.scaler = std::make_unique<GradScaler>(
          GradScalerOptions{.init_scale = 1024.0, .growth_interval = 2, .capturable = capturable});
      run.schedule = std::make_unique<OneCycleLR>(*run.optimizer, 0.2, 12);
      return run;
    };
    Run host = make_run(false), device = make_run(true);
    const Tensor x = random_f64({4, 3}, 5).to(DType::f32);
    auto iteration = [&](Run& run, std::optional<double> poison) {
      run.optimizer->zero_grad();
      run.scaler->scale(sum(square(run.model->forward(x)))).backward();
      if (poison) poison_grad(run.model->bias, 1, *poison);
      run.scaler->step(*run.optimizer);
      run.scaler->update();
      run.schedule->step();
    };
    for (int step = 0; step < 8; ++step) {
      INFO("step " << step);
      const std::optional<double> poison =
          step == 3 ? std::optional<double>(kInf) : std::optional<double>();
      iteration(host, poison);
      iteration(device, poison);
      CHECK(device.model->weight.tolist() == host.model->weight.tolist());
      CHECK(device.model->bias.tolist() == host.model->bias.tolist());
      CHECK(snapshot(*device.optimizer) == snapshot(*host.optimizer));
      CHECK(device.scaler->get_scale() == host.scaler->get_scale());
      CHECK(device.scaler->growth_tracker() == host.scaler->growth_tracker());
      CHECK(device.scaler->found_inf().item() == (step == 3 ? 1.0 : 0.0));
    }
    // Growth every 2 clean steps: doubled at steps 1, 5 and 7, halved at 3 (which resets the
    // count).
    CHECK(host.scaler->get_scale() == 4096.0);
    CHECK(device.scaler->state_dict().at("scale").item() == 4096.0);
  }
}

TEST_CASE("grad_scaler: capturable needs a capturable optimizer, and refuses a second device") {
  Tensor w = param({1.0, 2.0}, DType::f32);
  SGD plain({w}, {.lr = 0.1});
  w.set_grad(ones({2}));
  GradScaler scaler({.capturable = true});
  CHECK_THROWS_WITH(scaler.unscale_(plain), Catch::Contains("no loss was scaled yet"));
  scaler = GradScaler({.capturable = true});
  scaler.scale(sum(w)).backward();
  CHECK_THROWS_WITH(scaler.step(plain), Catch::Contains("needs a capturable SGD"));
  CHECK_THROWS_AS(plain.step_unless(zeros({1})), NotImplementedError);
  CHECK_THROWS_WITH(SGD({w}, {.momentum = 0.9, .dampening = 0.1, .capturable = true}),
                    Catch::Contains("capturable with momentum needs dampening 0"));
  CHECK_THROWS_WITH(Adam({w}, {.foreach = false, .capturable = true}),
                    Catch::Contains("capturable needs the fused step"));
  SGD capturable({w}, {.lr = 0.1, .capturable = true});
  CHECK_THROWS_AS(capturable.step_unless(zeros({1}, DType::f64)), DeviceError);
}

TEST_CASE("grad_scaler: a clean step is the plain step on the true gradients") {
  // A power-of-two scale commutes with every rounding on the way (no overflow, no underflow), so
  // the unscaled gradients, and the weights after the step, are exactly the unscaled run's.
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    nn::Linear scaled(3, 2), plain(3, 2);
    scaled.to(dtype);
    plain.to(dtype);
    {
      NoGradGuard no_grad;
      plain.weight.copy_(scaled.weight);
      plain.bias.copy_(scaled.bias);
    }
    const Tensor x = random_f64({4, 3}, 6).to(dtype);
    SGD sgd_scaled(scaled.parameters(), {.lr = 0.1, .momentum = 0.9}),
        sgd_plain(plain.parameters(), {.lr = 0.1, .momentum = 0.9});
    GradScaler scaler({.init_scale = 4096.0});
    for (int step = 0; step < 3; ++step) {
      sgd_scaled.zero_grad();
      scaler.scale(sum(square(scaled.forward(x)))).backward();
      CHECK(scaler.step(sgd_scaled));
      scaler.update();
      sgd_plain.zero_grad();
      sum(square(plain.forward(x))).backward();
      sgd_plain.step();
      CHECK(scaled.weight.grad().tolist() == plain.weight.grad().tolist());
      CHECK(scaled.weight.tolist() == plain.weight.tolist());
      CHECK(scaled.bias.tolist() == plain.bias.tolist());
    }
  }
}

TEST_CASE("grad_scaler: scale() multiplies the loss and is recorded by autograd") {
  Tensor p = param({1.5, -2.0}, DType::f32);
  GradScaler scaler({.init_scale = 8.0});
  Tensor loss = sum(mul(p, 3.0));
  Tensor scaled = scaler.scale(loss);
  CHECK(scaled.item<double>() == -1.5 * 8.0);
  CHECK(scaled.dtype() == DType::f32);
  scaled.backward();
  CHECK(p.grad().tolist() == std::vector<double>{24.0, 24.0});
}

TEST_CASE("grad_scaler: the scale grows after growth_interval clean steps in a row") {
  Tensor p = param({0.5, -0.25}, DType::f32);
  SGD sgd({p}, {.lr = 0.01});
  GradScaler scaler({.init_scale = 4.0, .growth_interval = 3});
  auto iteration = [&](bool overflow) {
    sgd.zero_grad();
    scaler.scale(sum(mul(p, 1e-3))).backward();
    if (overflow) poison_grad(p, 0, kInf);
    scaler.step(sgd);
    scaler.update();
    return std::pair{scaler.get_scale(), scaler.growth_tracker()};
  };
  using R = std::pair<double, int64_t>;
  CHECK(iteration(false) == R{4.0, 1});
  CHECK(iteration(false) == R{4.0, 2});
  CHECK(iteration(false) == R{8.0, 0});
  CHECK(iteration(false) == R{8.0, 1});
  CHECK(iteration(true) == R{4.0, 0});  // an overflow starts the count again
  CHECK(iteration(false) == R{4.0, 1});
  CHECK(iteration(false) == R{4.0, 2});
  CHECK(iteration(false) == R{8.0, 0});

  // update(new_scale) sets the scale (rounded to f32) and keeps the count.
  iteration(false);
  scaler.step(sgd);
  scaler.update(1.0 / 3);
  CHECK(scaler.get_scale() == static_cast<double>(1.0f / 3));
  CHECK(scaler.growth_tracker() == 1);
}

TEST_CASE("grad_scaler: growth past f32's largest value is refused and resets the count") {
  Tensor p = param({0.5}, DType::f32);
  SGD sgd({p}, {.lr = 0.0});
  GradScaler scaler({.init_scale = 0x1p126, .growth_interval = 1});
  for (double want : {0x1p127, 0x1p127, 0x1p127}) {
    sgd.zero_grad();
    scaler.scale(sum(mul(p, 1e-3))).backward();
    CHECK(scaler.step(sgd));
    scaler.update();
    CHECK(scaler.get_scale() == want);
    CHECK(scaler.growth_tracker() == 0);
  }
}

TEST_CASE("grad_scaler: unscale_ before clip_grad_norm_ clips the true gradients") {
  for (double max_norm : {100.0, 1.0}) {
    INFO("max_norm " << max_norm);
    Tensor p = param({1.0, 2.0}, DType::f32);
    SGD sgd({p}, {.lr = 1.0});
    GradScaler scaler({.init_scale = 1024.0});
    // d/dp sum(p * [3, 4]) = [3, 4]: norm 5.
    scaler.scale(sum(mul(p, tensor(std::vector<double>{3.0, 4.0}).to(DType::f32)))).backward();
    CHECK(p.grad().tolist() == std::vector<double>{3072.0, 4096.0});
    scaler.unscale_(sgd);
    CHECK(p.grad().tolist() == std::vector<double>{3.0, 4.0});
    CHECK(clip_grad_norm_({p}, max_norm) == Approx(5.0).epsilon(1e-6));
    const std::vector<double> g = p.grad().tolist();
    CHECK(scaler.step(sgd));  // uses the clipped gradients as they are: no second unscale
    scaler.update();
    CHECK(p.tolist()[0] == Approx(1.0 - g[0]).epsilon(1e-6));
    CHECK(p.tolist()[1] == Approx(2.0 - g[1]).epsilon(1e-6));
    if (max_norm == 1.0) CHECK(g[0] == Approx(0.6).epsilon(1e-5));
  }
}

TEST_CASE("grad_scaler: f16, bf16 and f64 gradients are unscaled in one pass") {
  // One optimizer over parameters of four dtypes: one kernel call takes them all.
  std::vector<Tensor> params;
  std::vector<std::vector<double>> true_grads;
  const std::vector<DType> dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16};
  for (size_t i = 0; i < dtypes.size(); ++i) {
    params.push_back(param({0.0, 0.0, 0.0}, dtypes[i]));
    Tensor g = random_f64({3}, 10 + i).to(dtypes[i]);
    true_grads.push_back(g.tolist());
    params.back().set_grad(mul(g, 256.0));  // exact: a power of two
  }
  SGD sgd(params, {.lr = 0.0});
  GradScaler scaler({.init_scale = 256.0});
  scaler.unscale_(sgd);
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(dtype_name(dtypes[i]));
    CHECK(params[i].grad().dtype() == dtypes[i]);
    CHECK(params[i].grad().tolist() == true_grads[i]);
  }
  CHECK(scaler.step(sgd));
  scaler.update();

  // An f16 gradient that overflowed in backward (65504 * 2 is inf in f16) skips the step.
  params[2].set_grad(mul(full({3}, 65504.0, DType::f16), 2.0));
  for (size_t i : {0, 1, 3}) params[i].set_grad(zeros({3}, dtypes[i]));
  CHECK_FALSE(scaler.step(sgd));
  scaler.update();
  CHECK(scaler.get_scale() == 128.0);
}

TEST_CASE("grad_scaler: a non-contiguous gradient is unscaled in place of the original") {
  Tensor p = zeros({2, 3});
  p.requires_grad_();
  Tensor g = mul(random_f64({3, 2}, 4).to(DType::f32), 64.0).t();
  REQUIRE_FALSE(g.is_contiguous());
  p.set_grad(g);
  SGD sgd({p}, {.lr = 0.0});
  GradScaler scaler({.init_scale = 64.0});
  scaler.unscale_(sgd);
  CHECK(p.grad().tolist() == random_f64({3, 2}, 4).to(DType::f32).t().tolist());
}

TEST_CASE("grad_scaler: each optimizer steps on its own flags; update backs off once for all") {
  Tensor a = param({1.0}, DType::f32), b = param({1.0}, DType::f32);
  SGD sgd_a({a}, {.lr = 0.5}), sgd_b({b}, {.lr = 0.5});
  GradScaler scaler({.init_scale = 16.0, .growth_interval = 1});
  scaler.scale(sum(add(a, b))).backward();
  poison_grad(b, 0, kNaN);
  CHECK(scaler.step(sgd_a));
  CHECK_FALSE(scaler.step(sgd_b));
  scaler.update();
  CHECK(a.item<double>() == 0.5);
  CHECK(b.item<double>() == 1.0);
  CHECK(scaler.get_scale() == 8.0);
  CHECK(scaler.growth_tracker() == 0);
}

TEST_CASE("grad_scaler: a long scripted run follows PyTorch's update rule step by step") {
  struct Case {
    GradScalerOptions options;
    uint32_t seed;
    int steps;
    uint32_t max_clean;
  };
  // Scales from 5e-21 (odd factors, mostly backing off) to f32's largest power of two (growth
  // refused again and again), and PyTorch's defaults with clean runs long enough to grow.
  for (const Case& c :
       {Case{{.growth_interval = 5}, 1, 600, 24}, Case{{1000.0, 1.7, 0.3, 3}, 2, 600, 16},
        Case{{0x1p120, 4.0, 0.25, 2}, 3, 600, 12}, Case{{1.0, 2.0, 0.5, 1}, 4, 600, 12},
        Case{{}, 5, 12000, 4400}}) {
    INFO("growth_interval " << c.options.growth_interval << ", seed " << c.seed);
    const std::string script = bursty_script(c.steps, c.seed, c.max_clean);
    Tensor p = param({0.0, 0.0}, DType::f32);
    SGD sgd({p}, {.lr = 0.0});
    GradScaler scaler(c.options);
    ReferenceScaler ref{static_cast<float>(c.options.init_scale), c.options.growth_factor,
                        c.options.backoff_factor, static_cast<int32_t>(c.options.growth_interval)};
    int mismatches = 0;
    for (size_t i = 0; i < script.size(); ++i) {
      const bool overflow = script[i] != '.';
      p.set_grad(full({2}, overflow ? kInf : 1e-3 * scaler.get_scale(), DType::f32));
      CHECK(scaler.step(sgd) == !overflow);
      scaler.update();
      ref.update(overflow);
      if (scaler.get_scale() != static_cast<double>(ref.scale) ||
          scaler.growth_tracker() != ref.tracker) {
        if (++mismatches == 1)
          FAIL_CHECK(std::setprecision(17)
                     << "step " << i << ": scale " << scaler.get_scale() << " tracker "
                     << scaler.growth_tracker() << ", PyTorch's rule gives " << ref.scale << " and "
                     << ref.tracker);
      }
    }
    CHECK(mismatches == 0);
  }
}

// ---- misuse ----

TEST_CASE("grad_scaler: calls out of order are refused") {
  Tensor p = param({1.0}, DType::f32);
  SGD sgd({p}, {.lr = 0.1});
  GradScaler scaler;
  CHECK_THROWS_WITH(scaler.update(), Catch::Contains("GradScaler.update") &&
                                         Catch::Contains("no inf checks were recorded"));
  {
    GradScaler fresh;
    CHECK_THROWS_AS(fresh.step(sgd), ValueError);  // no gradient at all
    CHECK_THROWS_WITH(fresh.step(sgd),
                      Catch::Contains("GradScaler.step") &&
                          Catch::Contains("no parameter of this SGD has a gradient"));
  }

  scaler.scale(sum(p)).backward();
  scaler.unscale_(sgd);
  CHECK_THROWS_AS(scaler.unscale_(sgd), Error);
  CHECK_THROWS_WITH(scaler.unscale_(sgd), Catch::Contains("GradScaler.unscale_: already called"));
  CHECK(p.grad().item<double>() == 1.0);  // the refused call divided nothing
  CHECK(scaler.step(sgd));
  CHECK_THROWS_WITH(scaler.step(sgd), Catch::Contains("GradScaler.step: already called"));
  CHECK_THROWS_WITH(scaler.unscale_(sgd), Catch::Contains("after step()"));
  scaler.update();
  // update() opens the next iteration.
  sgd.zero_grad();
  scaler.scale(sum(p)).backward();
  CHECK(scaler.step(sgd));
  scaler.update();
}

TEST_CASE("grad_scaler: bad options and inputs are refused with the name and the value") {
  struct Case {
    GradScalerOptions options;
    const char* message;
  };
  for (const Case& c :
       {Case{{.init_scale = 0.0}, "init_scale must be positive"},
        Case{{.init_scale = -1.0}, "init_scale must be positive"},
        Case{{.init_scale = kInf}, "init_scale must be positive and finite"},
        Case{{.init_scale = 1e39}, "finite in f32, got 1e+39"},
        Case{{.growth_factor = 1.0}, "growth_factor must be finite and greater"},
        Case{{.growth_factor = 0.5}, "growth_factor"},
        Case{{.backoff_factor = 0.0}, "backoff_factor must be in (0, 1), got 0"},
        Case{{.backoff_factor = 1.0}, "backoff_factor must be in (0, 1), got 1"},
        Case{{.growth_interval = 0}, "growth_interval must be at least 1, got 0"}}) {
    INFO(c.message);
    CHECK_THROWS_AS(GradScaler(c.options), ValueError);
    CHECK_THROWS_WITH(GradScaler(c.options),
                      Catch::StartsWith("GradScaler: ") && Catch::Contains(c.message));
  }

  GradScaler scaler;
  CHECK_THROWS_AS(scaler.scale(Tensor()), DTypeError);
  CHECK_THROWS_WITH(scaler.scale(tensor<int64_t>({1, 2})),
                    Catch::Contains("GradScaler.scale: expected a floating loss tensor"));
  Tensor p = param({1.0, 2.0}, DType::f32);
  p.set_grad(tensor<int64_t>({1, 2}));
  SGD sgd({p}, {.lr = 0.1});
  CHECK_THROWS_AS(scaler.unscale_(sgd), DTypeError);
  CHECK_THROWS_WITH(scaler.unscale_(sgd),
                    Catch::Contains("GradScaler.unscale_: expected floating gradients"));
  for (double bad : {0.0, -2.0, kInf, kNaN, 1e39}) {
    CHECK_THROWS_WITH(scaler.update(bad), Catch::Contains("GradScaler.update: the new scale"));
  }
  CHECK(scaler.get_scale() == 65536.0);
}

// ---- disabled ----

TEST_CASE("grad_scaler: a disabled scaler passes everything through") {
  Tensor p = param({1.0, 2.0}, DType::f32);
  SGD sgd({p}, {.lr = 0.5});
  GradScaler scaler({.enabled = false});
  CHECK_FALSE(scaler.is_enabled());
  CHECK(scaler.get_scale() == 1.0);
  CHECK(scaler.growth_tracker() == 0);
  Tensor loss = sum(mul(p, 2.0));
  CHECK(scaler.scale(loss).is_same(loss));
  loss.backward();
  scaler.unscale_(sgd);
  scaler.unscale_(sgd);  // nothing to refuse either
  CHECK(p.grad().tolist() == std::vector<double>{2.0, 2.0});
  CHECK(scaler.step(sgd));
  CHECK(p.tolist() == std::vector<double>{0.0, 1.0});
  scaler.update();
  scaler.update(8.0);
  CHECK(scaler.get_scale() == 1.0);
  CHECK(scaler.state_dict().empty());
  scaler.load_state_dict({});
  scaler.load_state_dict(GradScaler().state_dict());
  CHECK(scaler.get_scale() == 1.0);
}

// ---- state ----

TEST_CASE("grad_scaler: state_dict holds PyTorch's keys as 0-dim f64 tensors") {
  GradScaler scaler({1024.0, 3.0, 0.25, 7, true});
  ScriptedRun run({1024.0, 3.0, 0.25, 7, true});
  for (char c : std::string("...i..")) run.step(c);
  const StateDict state = run.scaler.state_dict();
  std::map<std::string, double> values;
  for (const auto& [key, t] : state) {
    CHECK(t.dim() == 0);
    CHECK(t.dtype() == DType::f64);
    values[key] = t.item<double>();
  }
  CHECK(values == std::map<std::string, double>{{"scale", 256.0},
                                                {"growth_factor", 3.0},
                                                {"backoff_factor", 0.25},
                                                {"growth_interval", 7.0},
                                                {"_growth_tracker", 2.0}});
  scaler.load_state_dict(state);
  CHECK(scaler.get_scale() == 256.0);
  CHECK(scaler.growth_tracker() == 2);
  CHECK(scaler.growth_factor() == 3.0);
  CHECK(scaler.backoff_factor() == 0.25);
  CHECK(scaler.growth_interval() == 7);
}

TEST_CASE("grad_scaler: a bad state is refused with its key, and changes nothing") {
  const StateDict good = GradScaler({.init_scale = 512.0, .growth_interval = 10}).state_dict();
  auto with = [&](const std::string& key, std::optional<double> value) {
    StateDict s = good;
    if (value)
      s[key] = scalar_tensor(*value, DType::f64);
    else
      s.erase(key);
    return s;
  };
  struct Case {
    StateDict state;
    const char* message;
  };
  std::vector<Case> cases = {
      {with("scale", std::nullopt), "missing 'scale'"},
      {with("growth_factor", std::nullopt), "missing 'growth_factor'"},
      {with("backoff_factor", std::nullopt), "missing 'backoff_factor'"},
      {with("growth_interval", std::nullopt), "missing 'growth_interval'"},
      {with("_growth_tracker", std::nullopt), "missing '_growth_tracker'"},
      {with("scale", -1.0), "scale must be positive and finite in f32, got -1"},
      {with("scale", kNaN), "scale must be positive"},
      {with("growth_factor", 0.9), "growth_factor must be finite and greater than 1, got 0.9"},
      {with("backoff_factor", 2.0), "backoff_factor must be in (0, 1), got 2"},
      {with("growth_interval", 1.5), "'growth_interval' must be a whole number"},
      {with("growth_interval", 0.0), "'growth_interval' must be a whole number in [1, "},
      {with("_growth_tracker", -1.0), "'_growth_tracker' must be a whole number in [0, 10)"},
      {with("_growth_tracker", 10.0),
       "'_growth_tracker' must be a whole number in [0, 10), got 10"},
      {with("scaler", 1.0), "unknown key 'scaler'"},
      {{}, "the state is empty"}};
  StateDict two_values = good;
  two_values["scale"] = ones({2}, DType::f64);
  cases.push_back({two_values, "'scale' should hold one value, got [2] f64 cpu"});

  GradScaler scaler({.init_scale = 4.0, .growth_interval = 3});
  for (const Case& c : cases) {
    INFO(c.message);
    CHECK_THROWS_AS(scaler.load_state_dict(c.state), ValueError);
    CHECK_THROWS_WITH(
        scaler.load_state_dict(c.state),
        Catch::StartsWith("GradScaler.load_state_dict: ") && Catch::Contains(c.message));
    CHECK(scaler.get_scale() == 4.0);
    CHECK(scaler.growth_interval() == 3);
  }
}

TEST_CASE("grad_scaler: a run resumed from state_dict gives the uninterrupted run's scales") {
  const std::string script = "..i.....n.m.....ii.......i........n....";
  const GradScalerOptions options{.init_scale = 2048.0, .growth_interval = 4};
  ScriptedRun whole(options);
  std::vector<double> scales, trackers;
  for (char c : script) {
    whole.step(c);
    scales.push_back(whole.scaler.get_scale());
    trackers.push_back(static_cast<double>(whole.scaler.growth_tracker()));
  }
  for (size_t cut : {size_t{3}, size_t{14}, size_t{22}}) {
    INFO("resumed after step " << cut);
    ScriptedRun first(options);
    for (size_t i = 0; i < cut; ++i) first.step(script[i]);
    // The second run starts from PyTorch's defaults: everything it needs is in the state.
    ScriptedRun second(GradScalerOptions{});
    second.scaler.load_state_dict(first.scaler.state_dict());
    second.sgd.load_state_dict(first.sgd.state_dict());
    {
      NoGradGuard no_grad;
      second.model.weight.copy_(first.model.weight);
      second.model.bias.copy_(first.model.bias);
    }
    for (size_t i = cut; i < script.size(); ++i) {
      second.step(script[i]);
      CHECK(second.scaler.get_scale() == scales[i]);
      CHECK(static_cast<double>(second.scaler.growth_tracker()) == trackers[i]);
    }
    CHECK(second.model.weight.tolist() == whole.model.weight.tolist());
  }
}

TEST_CASE("grad_scaler: a training checkpoint restores the scale and the tracker") {
  TempDir dir("kiln_test_grad_scaler");
  const std::string path = dir.file("last.safetensors");
  const std::string script = "...i....n...........i.....";
  const GradScalerOptions options{.init_scale = 512.0, .growth_interval = 3};
  ScriptedRun whole(options);
  for (char c : script) whole.step(c);

  ScriptedRun first(options);
  const size_t cut = 11;
  for (size_t i = 0; i < cut; ++i) first.step(script[i]);
  train::TrainingState saved{&first.model, &first.sgd, nullptr, nullptr, {0, 11, 11}};
  saved.scaler = &first.scaler;
  train::save_training_checkpoint(path, saved);
  CHECK(nn::load_safetensors(path).tensors.count("scaler._growth_tracker") == 1);

  ScriptedRun second(GradScalerOptions{});
  train::TrainingState state{&second.model, &second.sgd, nullptr, nullptr, {}};
  state.scaler = &second.scaler;
  train::load_training_checkpoint(path, state);
  CHECK(second.scaler.get_scale() == first.scaler.get_scale());
  CHECK(second.scaler.growth_tracker() == first.scaler.growth_tracker());
  CHECK(second.scaler.growth_interval() == 3);
  for (size_t i = cut; i < script.size(); ++i) second.step(script[i]);
  CHECK(second.scaler.get_scale() == whole.scaler.get_scale());
  CHECK(second.scaler.growth_tracker() == whole.scaler.growth_tracker());
  CHECK(second.model.weight.tolist() == whole.model.weight.tolist());
}

TEST_CASE("grad_scaler: a checkpoint without scaler state is refused before anything is loaded") {
  TempDir dir("kiln_test_grad_scaler");
  const std::string path = dir.file("last.safetensors");
  ScriptedRun saved_run(GradScalerOptions{.init_scale = 512.0});
  saved_run.step('.');
  train::TrainingState saved{&saved_run.model, &saved_run.sgd, nullptr, nullptr, {}};
  train::save_training_checkpoint(path, saved);  // no scaler

  ScriptedRun target(GradScalerOptions{.init_scale = 8.0});
  const std::vector<double> weight = target.model.weight.tolist();
  train::TrainingState state{&target.model, &target.sgd, nullptr, nullptr, {}};
  state.scaler = &target.scaler;
  CHECK_THROWS_AS(train::load_training_checkpoint(path, state), ValueError);
  CHECK_THROWS_WITH(train::load_training_checkpoint(path, state),
                    Catch::Contains(path) && Catch::Contains("no GradScaler state"));
  CHECK(target.model.weight.tolist() == weight);
  CHECK(target.scaler.get_scale() == 8.0);

  // A saved value out of its domain is refused the same way, before the model is touched.
  saved.scaler = &saved_run.scaler;
  train::save_training_checkpoint(path, saved);
  nn::SafetensorsFile file = nn::load_safetensors(path);
  file.tensors["scaler.backoff_factor"] = scalar_tensor(1.5, DType::f64);
  nn::save_safetensors(path, file.tensors, file.metadata);
  CHECK_THROWS_WITH(train::load_training_checkpoint(path, state),
                    Catch::Contains("backoff_factor must be in (0, 1), got 1.5"));
  CHECK(target.model.weight.tolist() == weight);
  CHECK(target.scaler.get_scale() == 8.0);

  // A disabled scaler asks for nothing.
  GradScaler disabled({.enabled = false});
  state.scaler = &disabled;
  train::save_training_checkpoint(path, {&saved_run.model, &saved_run.sgd, nullptr, nullptr, {}});
  train::load_training_checkpoint(path, state);
  CHECK(target.model.weight.tolist() == saved_run.model.weight.tolist());
}

// ---- against PyTorch ----

TEST_CASE("grad_scaler: scripted runs against PyTorch (skipped without the reference file)",
          "[may_skip][torch_reference]") {
  const std::string file = "grad_scaler_sequence.json";
  if (!std::filesystem::exists(kiln::testing::reference_dir() + "/" + file)) {
    WARN("SKIPPED: tests/reference/" << file
                                     << " is missing; make it with a PyTorch >= 2.3: python3 "
                                        "tests/reference/grad_scaler_sequence.py");
    return;
  }
  const nlohmann::json ref = kiln::testing::torch_reference(file);
  REQUIRE(ref.at("cases").size() > 0);
  for (const nlohmann::json& c : ref.at("cases")) {
    INFO(c.at("name").get<std::string>()
         << " (torch " << ref.at("torch").get<std::string>() << ")");
    const GradScalerOptions options{
        c.at("init_scale").get<double>(), c.at("growth_factor").get<double>(),
        c.at("backoff_factor").get<double>(), c.at("growth_interval").get<int64_t>(), true};
    ScriptedRun run(options, kiln::testing::doubles(c.at("weight")),
                    kiln::testing::doubles(c.at("bias")), kiln::testing::doubles(c.at("inputs")),
                    c.at("lr").get<double>(), c.at("momentum").get<double>(),
                    c.at("loss_factor").get<double>(), c.at("clip").get<bool>());
    const std::string script = c.at("steps").get<std::string>();
    const std::vector<double> scales = kiln::testing::doubles(c.at("scale"));
    const std::vector<int64_t> trackers = kiln::testing::ints(c.at("growth_tracker"));
    const std::vector<bool> stepped = c.at("stepped").get<std::vector<bool>>();
    REQUIRE(scales.size() == script.size());
    for (size_t i = 0; i < script.size(); ++i) {
      INFO("step " << i << " ('" << script[i] << "')");
      CHECK(run.step(script[i]) == stepped[i]);
      CHECK(run.scaler.get_scale() == scales[i]);
      CHECK(run.scaler.growth_tracker() == trackers[i]);
    }
    const std::vector<double> weight = kiln::testing::doubles(c.at("final_weight"));
    const std::vector<double> bias = kiln::testing::doubles(c.at("final_bias"));
    check_close(run.model.weight, weight, relative_to_largest(1e-5, weight));
    check_close(run.model.bias, bias, relative_to_largest(1e-5, bias));
  }
}
