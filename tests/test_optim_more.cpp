// RMSprop, Adagrad, NAdam, RAdam, ExponentialLR, LambdaLR, CosineAnnealingWarmRestarts and
// ReduceLROnPlateau against PyTorch 1.13 (tests/reference/optimizers.json, make_optimizers.py).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "torch_reference.h"

using namespace kiln;
using Catch::Contains;
using kiln::testing::check_against_torch;
using kiln::testing::doubles;
using kiln::testing::torch_reference;
using nlohmann::json;

namespace {

std::unique_ptr<optim::Optimizer> make(const json& c, const Tensor& p) {
  const json& o = c.at("options");
  if (c.at("optimizer") == "NAdam")
    return std::make_unique<optim::NAdam>(
        std::vector<Tensor>{p},
        optim::NAdamOptions{.lr = o.value("lr", 2e-3),
                            .weight_decay = o.value("weight_decay", 0.0),
                            .momentum_decay = o.value("momentum_decay", 4e-3)});
  if (c.at("optimizer") == "RAdam") {
    const std::vector<double> betas = o.value("betas", std::vector<double>{0.9, 0.999});
    return std::make_unique<optim::RAdam>(
        std::vector<Tensor>{p}, optim::RAdamOptions{.lr = o.value("lr", 1e-3),
                                                    .beta1 = betas[0],
                                                    .beta2 = betas[1],
                                                    .weight_decay = o.value("weight_decay", 0.0)});
  }
  if (c.at("optimizer") == "RMSprop")
    return std::make_unique<optim::RMSprop>(
        std::vector<Tensor>{p}, optim::RMSpropOptions{.lr = o.value("lr", 1e-2),
                                                      .alpha = o.value("alpha", 0.99),
                                                      .eps = o.value("eps", 1e-8),
                                                      .weight_decay = o.value("weight_decay", 0.0),
                                                      .momentum = o.value("momentum", 0.0),
                                                      .centered = o.value("centered", false)});
  return std::make_unique<optim::Adagrad>(
      std::vector<Tensor>{p},
      optim::AdagradOptions{.lr = o.value("lr", 1e-2),
                            .lr_decay = o.value("lr_decay", 0.0),
                            .weight_decay = o.value("weight_decay", 0.0),
                            .initial_accumulator_value = o.value("initial_accumulator_value", 0.0),
                            .eps = o.value("eps", 1e-10)});
}

// Rates of the schedule over PyTorch's number of steps, read before each step as PyTorch's were.
std::vector<double> rates(
    const std::function<std::unique_ptr<optim::LRScheduler>(optim::Optimizer&)>& make_schedule,
    size_t steps) {
  Tensor p = zeros({1}).requires_grad_(true);
  optim::SGD opt({p}, {.lr = 0.1});
  auto schedule = make_schedule(opt);
  std::vector<double> out;
  for (size_t i = 0; i < steps; ++i) {
    out.push_back(opt.lr(0));
    schedule->step();
  }
  return out;
}

}  // namespace

TEST_CASE("RMSprop, Adagrad, NAdam and RAdam follow PyTorch 1.13's trajectories") {
  const json reference = torch_reference("optimizers.json");
  for (const json& c : reference.at("optimizers")) {
    INFO(c.at("optimizer") << " " << c.at("options").dump());
    Tensor p = tensor(doubles(reference.at("start"))).requires_grad_(true);
    auto opt = make(c, p);
    for (const json& want : c.at("steps")) {
      opt->zero_grad();
      add(mul(p, p).sum(), sin(mul(p, 3.0)).sum()).backward();
      opt->step();
      check_against_torch(p.detach(), doubles(want), 1e-13);
    }
  }
  Tensor p = zeros({2}).requires_grad_(true);
  CHECK_THROWS_WITH(optim::RMSprop({p}, {.alpha = -0.5}), Contains("RMSprop: alpha"));
  CHECK_THROWS_WITH(optim::Adagrad({p}, {.lr = -1.0}), Contains("Adagrad: lr"));
}

TEST_CASE("ExponentialLR, LambdaLR and CosineAnnealingWarmRestarts give PyTorch's rates") {
  const json s = torch_reference("optimizers.json").at("schedules");
  const size_t n = s.at("ExponentialLR").size();
  using Ptr = std::unique_ptr<optim::LRScheduler>;
  check_against_torch(
      tensor(rates(
          [](optim::Optimizer& o) -> Ptr { return std::make_unique<optim::ExponentialLR>(o, 0.9); },
          n)),
      doubles(s.at("ExponentialLR")), 1e-14);
  check_against_torch(tensor(rates(
                          [](optim::Optimizer& o) -> Ptr {
                            return std::make_unique<optim::LambdaLR>(o, [](int64_t e) {
                              return 1.0 / std::sqrt(1.0 + static_cast<double>(e));
                            });
                          },
                          n)),
                      doubles(s.at("LambdaLR")), 1e-14);
  check_against_torch(tensor(rates(
                          [](optim::Optimizer& o) -> Ptr {
                            return std::make_unique<optim::CosineAnnealingWarmRestarts>(o, 3, 2,
                                                                                        0.01);
                          },
                          n)),
                      doubles(s.at("CosineAnnealingWarmRestarts")), 1e-12);
  check_against_torch(tensor(rates(
                          [](optim::Optimizer& o) -> Ptr {
                            return std::make_unique<optim::CosineAnnealingWarmRestarts>(o, 4);
                          },
                          n)),
                      doubles(s.at("CosineAnnealingWarmRestarts_1")), 1e-12);
}

TEST_CASE("ReduceLROnPlateau lowers the rate where PyTorch's does") {
  const json plateau = torch_reference("optimizers.json").at("plateau");
  const std::vector<double> metrics = doubles(plateau.at("metrics"));
  for (const auto& [name, run] : plateau.at("runs").items()) {
    INFO(name);
    const json& o = run.at("options");
    Tensor p = zeros({1}).requires_grad_(true);
    optim::SGD opt({p}, {.lr = 0.1});
    optim::ReduceLROnPlateau schedule(
        opt, {.maximize = o.value("mode", std::string("min")) == "max",
              .factor = o.value("factor", 0.1),
              .patience = o.value("patience", 10),
              .threshold = o.value("threshold", 1e-4),
              .relative_threshold = o.value("threshold_mode", std::string("rel")) == "rel",
              .cooldown = o.value("cooldown", 0),
              .min_lr = o.value("min_lr", 0.0)});
    std::vector<double> seen;
    for (double m : metrics) {
      schedule.step(m);
      seen.push_back(opt.lr(0));
    }
    check_against_torch(tensor(seen), doubles(run.at("lrs")), 1e-15);
  }
  Tensor p = zeros({1}).requires_grad_(true);
  optim::SGD opt({p}, {.lr = 0.1});
  CHECK_THROWS_WITH(optim::ReduceLROnPlateau(opt, {.factor = 1.5}), Contains("factor"));
  optim::ReduceLROnPlateau schedule(opt);
  CHECK_THROWS_WITH(schedule.step(std::nan("")), Contains("NaN"));
}

TEST_CASE("SequentialLR runs its schedules one after another, as PyTorch 1.13's") {
  const json s = torch_reference("optimizers.json").at("schedules");
  const size_t n = s.at("SequentialLR_warmup_cosine").size();
  using Ptr = std::unique_ptr<optim::LRScheduler>;
  check_against_torch(tensor(rates(
                          [](optim::Optimizer& o) -> Ptr {
                            return std::make_unique<optim::SequentialLR>(
                                o,
                                std::vector<std::shared_ptr<optim::LRScheduler>>{
                                    std::make_shared<optim::LinearLR>(o, 0.1, 1.0, 4),
                                    std::make_shared<optim::CosineAnnealingLR>(o, 12, 0.001)},
                                std::vector<int64_t>{5});
                          },
                          n)),
                      doubles(s.at("SequentialLR_warmup_cosine")), 1e-12);
  check_against_torch(tensor(rates(
                          [](optim::Optimizer& o) -> Ptr {
                            return std::make_unique<optim::SequentialLR>(
                                o,
                                std::vector<std::shared_ptr<optim::LRScheduler>>{
                                    std::make_shared<optim::ExponentialLR>(o, 0.8),
                                    std::make_shared<optim::StepLR>(o, 3, 0.5),
                                    std::make_shared<optim::LinearLR>(o, 0.5, 1.0, 6)},
                                std::vector<int64_t>{4, 13});
                          },
                          n)),
                      doubles(s.at("SequentialLR_three")), 1e-12);

  // A resumed schedule (its step is its whole state) lands where the uninterrupted one is.
  Tensor p = zeros({1}).requires_grad_(true);
  optim::SGD opt({p}, {.lr = 0.1});
  auto make = [&] {
    return optim::SequentialLR(opt,
                               {std::make_shared<optim::LinearLR>(opt, 0.1, 1.0, 4),
                                std::make_shared<optim::ExponentialLR>(opt, 0.9)},
                               {5});
  };
  optim::SequentialLR first = make();
  for (int i = 0; i < 9; ++i) first.step();
  const double expected = opt.lr(0);
  optim::SGD fresh_opt({p}, {.lr = 0.1});
  optim::SequentialLR resumed(fresh_opt,
                              {std::make_shared<optim::LinearLR>(fresh_opt, 0.1, 1.0, 4),
                               std::make_shared<optim::ExponentialLR>(fresh_opt, 0.9)},
                              {5});
  resumed.set_last_epoch(9);
  CHECK(fresh_opt.lr(0) == Approx(expected).epsilon(1e-15));
  CHECK(expected == Approx(0.1 * std::pow(0.9, 4)).epsilon(1e-12));

  optim::SGD other({p}, {.lr = 0.1});
  CHECK_THROWS_WITH(
      optim::SequentialLR(opt, {std::make_shared<optim::ExponentialLR>(opt, 0.9)}, {3}),
      Contains("1 schedulers need 0 milestones"));
  CHECK_THROWS_WITH(optim::SequentialLR(opt,
                                        {std::make_shared<optim::ExponentialLR>(opt, 0.9),
                                         std::make_shared<optim::ExponentialLR>(other, 0.9)},
                                        {3}),
                    Contains("scheduler 1 steps another optimizer"));
  CHECK_THROWS_WITH(optim::SequentialLR(opt,
                                        {std::make_shared<optim::ExponentialLR>(opt, 0.9),
                                         std::make_shared<optim::ExponentialLR>(opt, 0.9),
                                         std::make_shared<optim::ExponentialLR>(opt, 0.9)},
                                        {3, 3}),
                    Contains("increasing"));
}
