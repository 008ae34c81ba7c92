// Learning-rate schedules against their closed forms (and PyTorch's OneCycleLR phases), resuming
// with set_last_epoch.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/sgd.h"

using namespace kiln;
using namespace kiln::optim;

namespace {

Tensor param(std::vector<double> values) {
  Tensor p = tensor(values);
  p.requires_grad_();
  return p;
}

SGD sgd(std::vector<Tensor> params, double lr, double momentum = 0.0) {
  SGDOptions o;
  o.lr = lr;
  o.momentum = momentum;
  return SGD(std::move(params), o);
}

// Steps the scheduler `steps` times and checks the rate of group 0 before each step and after
// the last against expected(step).
template <class F>
void check_sequence(LRScheduler& scheduler, Optimizer& opt, int64_t steps, F expected) {
  for (int64_t e = 0; e <= steps; ++e) {
    INFO("step " << e);
    CHECK(scheduler.last_epoch() == e);
    CHECK(opt.lr(0) == Approx(expected(e)).epsilon(1e-12).margin(1e-15));
    CHECK(scheduler.get_last_lr().at(0) == opt.lr(0));
    if (e < steps) scheduler.step();
  }
}

// torch/optim/lr_scheduler.py's OneCycleLR.get_lr for two cosine phases: the warm-up ends at
// step pct_start * total - 1, the annealing at total - 1, and the last phase extends past it.
double one_cycle_expected(int64_t step, int64_t total, double pct_start, double start, double peak,
                          double end) {
  auto anneal = [](double from, double to, double pct) {
    return to + (from - to) / 2.0 * (std::cos(M_PI * pct) + 1);
  };
  const double phase_end[2] = {pct_start * static_cast<double>(total) - 1,
                               static_cast<double>(total - 1)};
  const double from[2] = {start, peak}, to[2] = {peak, end};
  double start_step = 0;
  for (int i = 0; i < 2; ++i) {
    if (static_cast<double>(step) <= phase_end[i] || i == 1)
      return anneal(from[i], to[i],
                    (static_cast<double>(step) - start_step) / (phase_end[i] - start_step));
    start_step = phase_end[i];
  }
  return 0;
}

}  // namespace

TEST_CASE("lr_scheduler: StepLR") {
  // 0.1 for steps 0-2, 0.01 for 3-5, 1e-3 for 6-8, 1e-4 for 9-11.
  Tensor p = param({1.0});
  SGD opt = sgd({p}, 0.1);
  StepLR scheduler(opt, 3, 0.1);
  check_sequence(scheduler, opt, 11,
                 [](int64_t e) { return 0.1 * std::pow(0.1, static_cast<double>(e / 3)); });
  CHECK(opt.lr(0) == Approx(1e-4).epsilon(1e-12));
}

TEST_CASE("lr_scheduler: StepLR scales each group from its own base rate") {
  Tensor a = param({1.0}), b = param({1.0});
  SGD opt({{.params = {a}}, {.params = {b}, .lr = 1.0}}, {.lr = 0.1});
  StepLR scheduler(opt, 2, 0.5);
  for (int i = 0; i < 5; ++i) scheduler.step();
  // Step 5: two decays have passed.
  std::vector<double> lrs = scheduler.get_last_lr();
  REQUIRE(lrs.size() == 2);
  CHECK(lrs[0] == Approx(0.025).epsilon(1e-15));
  CHECK(lrs[1] == Approx(0.25).epsilon(1e-15));
}

TEST_CASE("lr_scheduler: MultiStepLR with unsorted milestones") {
  // Milestones {7, 3}: 1 for steps 0-2, 0.5 for 3-6, 0.25 from 7 on.
  Tensor p = param({1.0});
  SGD opt = sgd({p}, 1.0);
  MultiStepLR scheduler(opt, {7, 3}, 0.5);
  check_sequence(scheduler, opt, 12, [](int64_t e) { return e < 3 ? 1.0 : e < 7 ? 0.5 : 0.25; });
}

TEST_CASE("lr_scheduler: MultiStepLR counts a repeated milestone twice") {
  // As PyTorch's Counter of milestones: {5, 2, 5} decays once at 2 and twice at 5.
  Tensor p = param({1.0});
  SGD opt = sgd({p}, 1.0);
  MultiStepLR scheduler(opt, {5, 2, 5}, 0.5);
  check_sequence(scheduler, opt, 10, [](int64_t e) { return e < 2 ? 1.0 : e < 5 ? 0.5 : 0.125; });
}

TEST_CASE("lr_scheduler: CosineAnnealingLR with eta_min") {
  // 0.1 at step 0, halfway 0.001 + 0.099 / 2 = 0.0505 at step 5, eta_min = 0.001 at step 10,
  // then back up along the same cosine.
  Tensor p = param({1.0});
  SGD opt = sgd({p}, 0.1);
  CosineAnnealingLR scheduler(opt, 10, 0.001);
  check_sequence(scheduler, opt, 12, [](int64_t e) {
    return 0.001 + (0.1 - 0.001) * (1 + std::cos(M_PI * static_cast<double>(e) / 10)) / 2;
  });
  scheduler.set_last_epoch(5);
  CHECK(scheduler.get_last_lr()[0] == Approx(0.0505).epsilon(1e-14));
  scheduler.set_last_epoch(10);
  CHECK(scheduler.get_last_lr()[0] == Approx(0.001).epsilon(1e-14));
}

TEST_CASE("lr_scheduler: LinearLR warm-up") {
  // base 0.1, factor 0.25 -> 1 over 4 steps: 0.025, 0.04375, 0.0625, 0.08125, then 0.1 for good.
  Tensor p = param({1.0});
  SGD opt = sgd({p}, 0.1);
  LinearLR scheduler(opt, 0.25, 1.0, 4);
  const double expected[] = {0.025, 0.04375, 0.0625, 0.08125, 0.1};
  check_sequence(scheduler, opt, 11, [&](int64_t e) { return expected[std::min<int64_t>(e, 4)]; });
}

TEST_CASE("lr_scheduler: OneCycleLR follows PyTorch's phases") {
  // max_lr 0.2, 10 steps: initial 0.2 / 25 = 0.008, final 0.008 / 1e4 = 8e-7; the warm-up ends at
  // step 0.3 * 10 - 1 = 2 and the annealing at step 9. Midway through the warm-up (step 1) the
  // cosine is at its middle: lr = (0.008 + 0.2) / 2 = 0.104 and momentum (0.95 + 0.85) / 2 = 0.9.
  Tensor p = param({1.0});
  SGD opt = sgd({p}, 0.5, 0.5);
  OneCycleLR scheduler(opt, 0.2, 10);
  const SGDOptions& options = opt.options(0);
  for (int64_t e = 0; e <= 10; ++e) {
    INFO("step " << e);
    CHECK(options.lr == Approx(one_cycle_expected(e, 10, 0.3, 0.008, 0.2, 8e-7)).epsilon(1e-12));
    CHECK(options.momentum ==
          Approx(one_cycle_expected(e, 10, 0.3, 0.95, 0.85, 0.95)).epsilon(1e-12));
    if (e == 0) CHECK(options.lr == Approx(0.008).epsilon(1e-14));
    if (e == 1) {
      CHECK(options.lr == Approx(0.104).epsilon(1e-14));
      CHECK(options.momentum == Approx(0.9).epsilon(1e-14));
    }
    if (e == 2) {
      CHECK(options.lr == Approx(0.2).epsilon(1e-14));
      CHECK(options.momentum == Approx(0.85).epsilon(1e-14));
    }
    if (e == 9) {
      CHECK(options.lr == Approx(8e-7).epsilon(1e-10));
      CHECK(options.momentum == Approx(0.95).epsilon(1e-14));
    }
    if (e < 10) scheduler.step();
  }
}

TEST_CASE("lr_scheduler: OneCycleLR cycles Adam's beta1") {
  Tensor p = param({1.0});
  Adam opt({p}, {});
  OneCycleLR scheduler(opt, 0.01, 20);
  // Warm-up ends at step 5, annealing at 19.
  const AdamOptions& options = opt.options(0);
  for (int64_t e = 0; e < 20; ++e) {
    INFO("step " << e);
    CHECK(options.beta1 == Approx(one_cycle_expected(e, 20, 0.3, 0.95, 0.85, 0.95)).epsilon(1e-12));
    CHECK(options.lr == Approx(one_cycle_expected(e, 20, 0.3, 4e-4, 0.01, 4e-8)).epsilon(1e-12));
    CHECK(options.beta2 == 0.999);
    scheduler.step();
  }
}

TEST_CASE("lr_scheduler: OneCycleLR without momentum cycling leaves momentum alone") {
  Tensor p = param({1.0});
  SGD opt = sgd({p}, 0.5, 0.7);
  OneCycleOptions o;
  o.cycle_momentum = false;
  OneCycleLR scheduler(opt, 0.2, 10, o);
  for (int i = 0; i < 5; ++i) scheduler.step();
  CHECK(opt.options(0).momentum == 0.7);
}

TEST_CASE("lr_scheduler: OneCycleLR throws when stepped past total_steps") {
  // A loop that steps after each of its 10 batches reaches step 10; an 11th step is an error and
  // leaves the rate where it was.
  Tensor p = param({1.0});
  SGD opt = sgd({p}, 0.5, 0.5);
  OneCycleLR scheduler(opt, 0.2, 10);
  for (int i = 0; i < 10; ++i) scheduler.step();
  const double lr = opt.lr(0);
  CHECK_THROWS_AS(scheduler.step(), ValueError);
  CHECK_THROWS_WITH(scheduler.step(),
                    Catch::Contains("OneCycleLR") && Catch::Contains("total_steps is 10"));
  CHECK(scheduler.last_epoch() == 10);
  CHECK(opt.lr(0) == lr);
  CHECK_THROWS_AS(scheduler.set_last_epoch(11), ValueError);
}

TEST_CASE("lr_scheduler: set_last_epoch resumes the sequence") {
  // A fresh optimizer and scheduler set to step 4 continue exactly as the original does.
  Tensor a = param({1.0}), b = param({1.0});
  SGD opt_a = sgd({a}, 0.5, 0.9), opt_b = sgd({b}, 0.5, 0.9);
  OneCycleLR original(opt_a, 0.2, 12), resumed(opt_b, 0.2, 12);
  for (int i = 0; i < 4; ++i) original.step();
  resumed.set_last_epoch(4);
  for (int i = 4; i <= 12; ++i) {
    INFO("step " << i);
    CHECK(resumed.last_epoch() == original.last_epoch());
    CHECK(opt_b.serial_options(0) == opt_a.serial_options(0));
    if (i < 12) {
      original.step();
      resumed.step();
    }
  }

  Tensor c = param({1.0});
  SGD opt_c = sgd({c}, 0.1);
  MultiStepLR multi(opt_c, {2, 5}, 0.1);
  multi.set_last_epoch(6);
  CHECK(multi.get_last_lr()[0] == Approx(1e-3).epsilon(1e-14));
  multi.set_last_epoch(0);
  CHECK(multi.get_last_lr()[0] == 0.1);
  CHECK_THROWS_AS(multi.set_last_epoch(-1), ValueError);
}

TEST_CASE("lr_scheduler: the optimizer steps with the scheduled rate") {
  // Gradient 1 each step under StepLR(2, 0.5) from lr 0.4: p = 1 - (0.4 + 0.4 + 0.2 + 0.2) = -0.2.
  Tensor p = param({1.0});
  SGD opt = sgd({p}, 0.4);
  StepLR scheduler(opt, 2, 0.5);
  for (int i = 0; i < 4; ++i) {
    p.set_grad(tensor({1.0}));
    opt.step();
    scheduler.step();
  }
  CHECK(p.item<double>() == Approx(-0.2).epsilon(1e-14));
}

TEST_CASE("lr_scheduler: invalid arguments are rejected") {
  Tensor p = param({1.0});
  SGD opt = sgd({p}, 0.1);
  CHECK_THROWS_AS(StepLR(opt, 0), ValueError);
  CHECK_THROWS_WITH(StepLR(opt, 0), Catch::Contains("StepLR"));
  CHECK_THROWS_AS(CosineAnnealingLR(opt, 0), ValueError);
  CHECK_THROWS_AS(LinearLR(opt, 0.0, 1.0, 5), ValueError);
  CHECK_THROWS_AS(LinearLR(opt, 0.5, 1.5, 5), ValueError);
  CHECK_THROWS_AS(LinearLR(opt, 0.5, 1.0, 0), ValueError);
  CHECK_THROWS_AS(OneCycleLR(opt, 0.1, 1), ValueError);
  OneCycleOptions bad_pct;
  bad_pct.pct_start = 1.0;
  CHECK_THROWS_AS(OneCycleLR(opt, 0.1, 10, bad_pct), ValueError);
  CHECK_THROWS_WITH(OneCycleLR(opt, 0.1, 10, bad_pct), Catch::Contains("pct_start"));
}
