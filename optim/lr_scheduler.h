// Learning-rate schedules, stepped once per epoch or per batch as the recipe needs. Each computes
// its rate in closed form from the step count, with PyTorch's formulas.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  // Advances one step and writes the new rates into the optimizer's groups.
  void step();
  std::vector<double> get_last_lr() const;
  int64_t last_epoch() const { return last_epoch_; }
  // For checkpoints: the step count is the whole state (the base rates come from the optimizer).
  void set_last_epoch(int64_t epoch);
  // Throws what set_last_epoch(epoch) would throw (a negative step, one past a one-cycle
  // schedule's end), changing nothing: a checkpoint's step is checked before anything is loaded.
  void check_last_epoch(int64_t epoch) const;

 protected:
  friend class SequentialLR;  // runs its schedulers' formulas
  explicit LRScheduler(Optimizer& optimizer);
  // Sets the rates for step 0; derived constructors call it once their fields are set.
  void start();
  virtual double lr_at(size_t group, int64_t step) const = 0;
  virtual void apply_extra(size_t, int64_t) {}
  // Every group's rate at `epoch`, or the schedule's error for it.
  std::vector<double> lrs_at(int64_t epoch) const;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;
};

// base * gamma^floor(step / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// base * gamma^(milestones passed)
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// eta_min + (base - eta_min) (1 + cos(pi step / t_max)) / 2
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear warm-up: base * (start + (end - start) min(step, total) / total).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
           int64_t total_iters = 5);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

struct OneCycleOptions {
  double pct_start = 0.3;
  double div_factor = 25.0;       // initial lr = max_lr / div_factor
  double final_div_factor = 1e4;  // final lr = initial lr / final_div_factor
  bool cycle_momentum = true;     // momentum (SGD) or beta1 (Adam) moves opposite to the lr
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};

// Smith's one-cycle policy with cosine annealing, stepped once per batch for total_steps steps;
// stepping beyond step total_steps throws ValueError, as in PyTorch.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps,
             OneCycleOptions options = {});

 protected:
  double lr_at(size_t group, int64_t step) const override;
  void apply_extra(size_t group, int64_t step) override;

 private:
  double phase_value(int64_t step, double start, double peak, double end) const;
  double max_lr_;
  int64_t total_steps_;
  OneCycleOptions options_;
};

// base * gamma^step
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  double gamma_;
};

// base * factor(step), as PyTorch's LambdaLR with one function for every group.
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  std::function<double(int64_t)> factor_;
};

// SGDR: cosine annealing from base to eta_min over t_0 steps, restarting at base; each period
// t_mult times the last.
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t t_0, int64_t t_mult = 1,
                              double eta_min = 0.0);

 protected:
  double lr_at(size_t group, int64_t step) const override;

 private:
  int64_t t_0_, t_mult_;
  double eta_min_;
};

// One schedule after another, as PyTorch's SequentialLR: schedulers[i] runs from milestones[i - 1]
// (0 for the first), its own step counted from there. Every scheduler must be on `optimizer`; each
// starts from the rates the optimizer had before the first was made (PyTorch's initial_lr), so
// warm-up then cosine is
//   SequentialLR(opt, {make_shared<LinearLR>(opt, 0.1, 1.0, 5),
//                      make_shared<CosineAnnealingLR>(opt, 95)}, {5})
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);

 protected:
  double lr_at(size_t group, int64_t step) const override;
  void apply_extra(size_t group, int64_t step) override;

 private:
  // The scheduler that runs at `step`, and its own step there.
  std::pair<LRScheduler*, int64_t> at(int64_t step) const;
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

struct ReduceLROnPlateauOptions {  // PyTorch's defaults
  bool maximize = false;           // mode "max": a larger metric is better
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  bool relative_threshold = true;  // threshold_mode "rel" (else "abs")
  int64_t cooldown = 0;
  double min_lr = 0.0;
  double eps = 1e-8;  // a reduction smaller than this is not made
};

// Lowers every group's rate by `factor` once the metric given to step() has not improved for
// more than `patience` steps, as PyTorch's ReduceLROnPlateau (not closed-form: it follows the
// metric, so it is no LRScheduler).
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  void step(double metric);
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }

 private:
  bool is_better(double metric) const;
  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0;
};

}  // namespace kiln::optim
