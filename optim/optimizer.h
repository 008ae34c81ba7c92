// Optimizer: parameter groups, per-parameter state, zero_grad and a state_dict that a checkpoint
// can hold. Each optimizer keeps its groups' options typed (SGDOptions, AdamOptions, ...) through
// TypedOptimizer (optim/typed_optimizer.h); what every optimizer shares (the parameters, the
// learning rate a schedule moves, the state dict) is here.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim {

// One group's options in a state dict's serial form: "param_groups.<g>.<name>" -> value, a flag
// as 0 or 1, as PyTorch's param_groups hold them. Only state_dict and load_state_dict use it; a
// step reads the typed options.
using SerialOptions = std::map<std::string, double>;

using StateDict = std::map<std::string, Tensor>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter that has a gradient; runs without recording history.
  virtual void step() = 0;
  const std::string& name() const { return name_; }

  // Capturable optimizers (SGDOptions/AdamOptions::capturable, as PyTorch's `capturable`): their
  // step is work a CUDA graph can hold (core/cuda_graph.h). The options a schedule changes (lr, and
  // SGD's momentum or Adam's beta1, which a one-cycle schedule cycles) are read from a device
  // tensor per parameter group, Adam's step counts live on the device, and the GradScaler skips a
  // step there (step_unless) rather than on the host. An eager step() writes the groups' options
  // to the device first; a replayed one reads what is there, so after changing them call
  // copy_options_to_device() before the replay (LRScheduler::step does). The other options are
  // the capture's: changing them needs a new capture.
  bool capturable() const { return capturable_; }
  void copy_options_to_device();
  // step(), skipped on the device (parameters and state untouched) when found_inf, an f32 [1] flag
  // on the parameters' device, is nonzero: the GradScaler's capturable path. Capturable
  // optimizers only; the others throw NotImplementedError.
  virtual void step_unless(const Tensor& found_inf);

  std::size_t num_param_groups() const { return params_.size(); }
  // Group `group`'s parameters (std::out_of_range past the last group).
  const std::vector<Tensor>& params(std::size_t group) const { return params_.at(group); }
  // Every group's parameters in order: the numbering of state_dict's "state.<i>".
  std::vector<Tensor> all_params() const;
  // Drops every parameter's gradient (PyTorch's default set_to_none=True).
  void zero_grad();

  // The options a schedule moves, for any optimizer; the others are the typed options' of each
  // optimizer (TypedOptimizer::options).
  virtual double lr(std::size_t group) const = 0;
  virtual void set_lr(std::size_t group, double lr) = 0;
  // The momentum a one-cycle schedule moves against the rate: SGD's and RMSprop's momentum, the
  // beta1 of Adam, AdamW, NAdam and RAdam; nullopt for Adagrad, which has none (and then
  // set_cycled_momentum throws ValueError).
  virtual std::optional<double> cycled_momentum(std::size_t group) const = 0;
  virtual void set_cycled_momentum(std::size_t group, double momentum) = 0;

  // Group `group`'s options in the state dict's serial form.
  virtual SerialOptions serial_options(std::size_t group) const = 0;
  // "param_groups.<g>.<option>" as 0-dim f64 tensors and "state.<i>.<name>" per parameter, with
  // parameters numbered across groups in order, as PyTorch numbers them. The state tensors share
  // storage with the live state, as in PyTorch: clone them to keep a snapshot while training on.
  StateDict state_dict() const;
  // Restores options and state, all or nothing: throws ValueError naming the optimizer and the key
  // when an option is missing, unknown, not one value or out of its domain, or when groups or
  // parameter indices disagree, and ShapeError when a saved tensor's shape is not its parameter's.
  void load_state_dict(const StateDict& state);

 protected:
  explicit Optimizer(std::string name, bool capturable = false);
  // Appends a group of these parameters after checking them: defined leaves, none repeated in it
  // or in another group (it would be stepped twice). Throws ValueError, adding nothing.
  void add_params(std::vector<Tensor> params);
  // Parses every group's serial options (one map per group, in order) and replaces the typed
  // options with them, all or nothing: throws ValueError naming the optimizer and the key.
  virtual void load_serial_options(const std::vector<SerialOptions>& groups) = 0;
  // The named state of one parameter, created on first use.
  std::map<std::string, Tensor>& state_of(const Tensor& param);

  // Capturable: the two options of group `group` a step reads on `device` (an f64 [2] tensor
  // there: lr and cycled_momentum), made on first use from the group's options and refreshed by
  // an eager step. Made during a capture, it is a GraphCaptureError: a step must run before (the
  // warm-up).
  Tensor device_options(std::size_t group, Device device);
  // Writes the options into the device tensors, unless this thread is capturing a graph on that
  // device (a replay reads what the device holds).
  void refresh_device_options(std::size_t group);

 private:
  std::string name_;
  std::vector<std::vector<Tensor>> params_;
  std::map<const TensorImpl*, std::map<std::string, Tensor>> state_;
  bool capturable_ = false;
  std::map<std::pair<std::size_t, int>, Tensor>
      device_options_;  // (group, device index) -> f64 [2]
};

}  // namespace kiln::optim
