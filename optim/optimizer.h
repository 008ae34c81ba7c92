// Optimizer: parameter groups with their own options (lr, weight_decay, ...), per-parameter state,
// zero_grad and a state_dict that a checkpoint can hold. SGD, Adam and AdamW derive from it.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim {

using Options = std::map<std::string, double>;

struct ParamGroup {
  std::vector<Tensor> params;
  Options options;  // merged with the optimizer's defaults when the group is added
};

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

  // Rejects unknown option keys and invalid values (ValueError).
  void add_param_group(ParamGroup group);
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Drops every parameter's gradient (PyTorch's default set_to_none=True).
  void zero_grad();

  // "param_groups.<g>.<option>" as 0-dim f64 tensors and "state.<i>.<name>" per parameter, with
  // parameters numbered across groups in order, as PyTorch numbers them. The state tensors share
  // storage with the live state, as in PyTorch: clone them to keep a snapshot while training on.
  StateDict state_dict() const;
  // Restores options and state, all or nothing: throws ValueError when groups, options or
  // parameter indices disagree and ShapeError when a saved tensor's shape is not its parameter's.
  void load_state_dict(const StateDict& state);

 protected:
  // Derived constructors call add_param_groups from their body, once check_options dispatches to
  // their override.
  Optimizer(std::string name, Options defaults, bool capturable = false);
  void add_param_groups(std::vector<ParamGroup> groups);
  // Throws ValueError when a group's merged options are out of their domain.
  virtual void check_options(const Options& options) const = 0;
  // The named state of one parameter, created on first use.
  std::map<std::string, Tensor>& state_of(const Tensor& param);

  // Capturable: the two options of group `group` a step reads on `device` (an f64 [2] tensor
  // there, the values of device_option_names()), made on first use from the group's options and
  // refreshed by an eager step. Made during a capture, it is a GraphCaptureError: a step must run
  // before (the warm-up).
  Tensor device_options(std::size_t group, Device device);
  // Writes the options into the device tensors, unless this thread is capturing a graph on that
  // device (a replay reads what the device holds).
  void refresh_device_options(std::size_t group);
  virtual std::pair<const char*, const char*> device_option_names() const { return {"lr", "lr"}; }

 private:
  std::string name_;
  Options defaults_;
  std::vector<ParamGroup> groups_;
  std::map<const TensorImpl*, std::map<std::string, Tensor>> state_;
  bool capturable_ = false;
  std::map<std::pair<std::size_t, int>, Tensor>
      device_options_;  // (group, device index) -> f64 [2]
};

}  // namespace kiln::optim
