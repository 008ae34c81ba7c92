#include "kiln/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/reduce.h"

namespace kiln::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) base_lrs_.push_back(optimizer.lr(g));
}

void LRScheduler::start() {
  set_last_epoch(0);
}

void LRScheduler::step() {
  set_last_epoch(last_epoch_ + 1);
}

std::vector<double> LRScheduler::lrs_at(int64_t epoch) const {
  KILN_CHECK(epoch >= 0, ValueError,
             "LRScheduler.set_last_epoch: expected a non-negative step, got {}", epoch);
  const size_t count = std::min(optimizer_.num_param_groups(), base_lrs_.size());
  std::vector<double> lrs;
  for (size_t g = 0; g < count; ++g) lrs.push_back(lr_at(g, epoch));
  return lrs;
}

void LRScheduler::check_last_epoch(int64_t epoch) const {
  lrs_at(epoch);
}

void LRScheduler::set_last_epoch(int64_t epoch) {
  // Every rate is computed before any is written, so a step the schedule rejects changes nothing.
  const std::vector<double> lrs = lrs_at(epoch);
  const size_t count = lrs.size();
  last_epoch_ = epoch;
  for (size_t g = 0; g < count; ++g) {
    optimizer_.set_lr(g, lrs[g]);
    apply_extra(g, epoch);
  }
  // A capturable optimizer's replayed steps read the rates on the device.
  optimizer_.copy_options_to_device();
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) out.push_back(optimizer_.lr(g));
  return out;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size > 0, ValueError, "StepLR: step_size must be positive, got {}", step_size);
  start();
}
double StepLR::lr_at(size_t g, int64_t step) const {
  return base_lrs_[g] * std::pow(gamma_, static_cast<double>(step / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  start();
}
double MultiStepLR::lr_at(size_t g, int64_t step) const {
  auto passed =
      std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin();
  return base_lrs_[g] * std::pow(gamma_, static_cast<double>(passed));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  KILN_CHECK(t_max > 0, ValueError, "CosineAnnealingLR: t_max must be positive, got {}", t_max);
  start();
}
double CosineAnnealingLR::lr_at(size_t g, int64_t step) const {
  return eta_min_ +
         (base_lrs_[g] - eta_min_) * (1 + std::cos(M_PI * static_cast<double>(step) / t_max_)) / 2;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  KILN_CHECK(start_factor > 0 && start_factor <= 1 && end_factor >= 0 && end_factor <= 1,
             ValueError, "LinearLR: factors must be in (0, 1] and [0, 1], got {} and {}",
             start_factor, end_factor);
  KILN_CHECK(total_iters > 0, ValueError, "LinearLR: total_iters must be positive, got {}",
             total_iters);
  start();
}
double LinearLR::lr_at(size_t g, int64_t step) const {
  double progress =
      static_cast<double>(std::min(step, total_iters_)) / static_cast<double>(total_iters_);
  return base_lrs_[g] * (start_factor_ + (end_factor_ - start_factor_) * progress);
}

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps,
                       OneCycleOptions options)
    : LRScheduler(optimizer), max_lr_(max_lr), total_steps_(total_steps), options_(options) {
  KILN_CHECK(total_steps > 1, ValueError, "OneCycleLR: total_steps must be at least 2, got {}",
             total_steps);
  KILN_CHECK(options.pct_start > 0 && options.pct_start < 1, ValueError,
             "OneCycleLR: pct_start must be in (0, 1), got {}", options.pct_start);
  KILN_CHECK(
      !options_.cycle_momentum || optimizer.cycled_momentum(0).has_value(), ValueError,
      "OneCycleLR: cycle_momentum needs an optimizer with momentum or beta1 ({} has neither)",
      optimizer.name());
  start();
}

double OneCycleLR::phase_value(int64_t step, double start_value, double peak,
                               double end_value) const {
  // PyTorch's two phases: warm up to step pct_start * total - 1, then anneal to step total - 1.
  const double warm_end = options_.pct_start * static_cast<double>(total_steps_) - 1;
  const double last = static_cast<double>(total_steps_ - 1);
  auto cos_anneal = [](double from, double to, double pct) {
    return to + (from - to) / 2.0 * (std::cos(M_PI * pct) + 1);
  };
  const double s = static_cast<double>(step);
  // A warm-up that ends at step 0 has reached its peak there (PyTorch divides by zero).
  if (s <= warm_end) return cos_anneal(start_value, peak, warm_end > 0 ? s / warm_end : 1.0);
  return cos_anneal(peak, end_value, (s - warm_end) / (last - warm_end));
}

double OneCycleLR::lr_at(size_t, int64_t step) const {
  // Step total_steps is allowed, as in PyTorch: a loop that steps after each of its total_steps
  // batches ends there.
  KILN_CHECK(step <= total_steps_, ValueError,
             "OneCycleLR: stepped {} times but total_steps is {}; give the scheduler the number of "
             "batches of the whole run",
             step, total_steps_);
  const double initial = max_lr_ / options_.div_factor;
  return phase_value(step, initial, max_lr_, initial / options_.final_div_factor);
}

void OneCycleLR::apply_extra(size_t g, int64_t step) {
  if (!options_.cycle_momentum) return;
  optimizer_.set_cycled_momentum(
      g, phase_value(step, options_.max_momentum, options_.base_momentum, options_.max_momentum));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer), gamma_(gamma) {
  KILN_CHECK(gamma > 0 && std::isfinite(gamma), ValueError,
             "ExponentialLR: gamma must be finite and positive, got {}", gamma);
  start();
}
double ExponentialLR::lr_at(size_t g, int64_t step) const {
  return base_lrs_[g] * std::pow(gamma_, static_cast<double>(step));
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor)
    : LRScheduler(optimizer), factor_(std::move(factor)) {
  KILN_CHECK(static_cast<bool>(factor_), ValueError, "LambdaLR: the factor function is empty");
  start();
}
double LambdaLR::lr_at(size_t g, int64_t step) const {
  return base_lrs_[g] * factor_(step);
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t t_0,
                                                         int64_t t_mult, double eta_min)
    : LRScheduler(optimizer), t_0_(t_0), t_mult_(t_mult), eta_min_(eta_min) {
  KILN_CHECK(t_0 > 0 && t_mult >= 1, ValueError,
             "CosineAnnealingWarmRestarts: t_0 must be positive and t_mult at least 1, got {} and "
             "{}",
             t_0, t_mult);
  start();
}
double CosineAnnealingWarmRestarts::lr_at(size_t g, int64_t step) const {
  // The period holding `step` and the place in it, as PyTorch's step() counts them.
  int64_t t_i = t_0_, t_cur = t_mult_ == 1 ? step % t_0_ : step;
  while (t_cur >= t_i) {
    t_cur -= t_i;
    t_i *= t_mult_;
  }
  return eta_min_ +
         (base_lrs_[g] - eta_min_) * (1 + std::cos(M_PI * static_cast<double>(t_cur) / t_i)) / 2;
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : optimizer_(optimizer),
      options_(options),
      best_(options.maximize ? -std::numeric_limits<double>::infinity()
                             : std::numeric_limits<double>::infinity()) {
  KILN_CHECK(options.factor >= 0 && options.factor < 1, ValueError,
             "ReduceLROnPlateau: factor must be in [0, 1), got {}", options.factor);
  KILN_CHECK(options.patience >= 0 && options.cooldown >= 0 && options.threshold >= 0, ValueError,
             "ReduceLROnPlateau: patience, cooldown and threshold must be non-negative, got {}, "
             "{} and {}",
             options.patience, options.cooldown, options.threshold);
}

bool ReduceLROnPlateau::is_better(double a) const {
  const double t = options_.threshold;
  if (options_.maximize) return options_.relative_threshold ? a > best_ * (1 + t) : a > best_ + t;
  return options_.relative_threshold ? a < best_ * (1 - t) : a < best_ - t;
}

void ReduceLROnPlateau::step(double metric) {
  KILN_CHECK(!std::isnan(metric), ValueError, "ReduceLROnPlateau::step: the metric is NaN");
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > options_.patience) {
    for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
      const double old_lr = optimizer_.lr(g);
      const double new_lr = std::max(old_lr * options_.factor, options_.min_lr);
      if (old_lr - new_lr > options_.eps) optimizer_.set_lr(g, new_lr);
    }
    if (optimizer_.capturable()) optimizer_.copy_options_to_device();
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
}

SequentialLR::SequentialLR(Optimizer& optimizer,
                           std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  KILN_CHECK(!schedulers_.empty(), ValueError, "SequentialLR: expected at least one scheduler");
  KILN_CHECK(milestones_.size() + 1 == schedulers_.size(), ValueError,
             "SequentialLR: {} schedulers need {} milestones, got {}", schedulers_.size(),
             schedulers_.size() - 1, milestones_.size());
  for (size_t i = 0; i < milestones_.size(); ++i)
    KILN_CHECK(milestones_[i] > (i == 0 ? 0 : milestones_[i - 1]), ValueError,
               "SequentialLR: milestones must be positive and increasing, got {} after {}",
               milestones_[i], i == 0 ? 0 : milestones_[i - 1]);
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    KILN_CHECK(schedulers_[i] != nullptr, ValueError, "SequentialLR: scheduler {} is null", i);
    KILN_CHECK(&schedulers_[i]->optimizer_ == &optimizer, ValueError,
               "SequentialLR: scheduler {} steps another optimizer than the SequentialLR's", i);
  }
  // Each scheduler wrote its step-0 rate when made: all start from the first one's base rates,
  // the optimizer's rates before any scheduler touched them.
  base_lrs_ = schedulers_[0]->base_lrs_;
  for (auto& s : schedulers_) s->base_lrs_ = base_lrs_;
  start();
}

std::pair<LRScheduler*, int64_t> SequentialLR::at(int64_t step) const {
  size_t i = 0;
  while (i < milestones_.size() && step >= milestones_[i]) ++i;
  return {schedulers_[i].get(), i == 0 ? step : step - milestones_[i - 1]};
}

double SequentialLR::lr_at(size_t g, int64_t step) const {
  auto [scheduler, local] = at(step);
  return scheduler->lr_at(g, local);
}

void SequentialLR::apply_extra(size_t g, int64_t step) {
  auto [scheduler, local] = at(step);
  scheduler->last_epoch_ = local;
  scheduler->apply_extra(g, local);
}

}  // namespace kiln::optim
