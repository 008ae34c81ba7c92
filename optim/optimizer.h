// Optimizer: parameter groups with their own options (lr, weight_decay, ...), per-parameter state,
// zero_grad and a state_dict that a checkpoint can hold. SGD, Adam and AdamW derive from it.
#pragma once

#include <map>
#include <string>
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
  Optimizer(std::string name, Options defaults);
  void add_param_groups(std::vector<ParamGroup> groups);
  // Throws ValueError when a group's merged options are out of their domain.
  virtual void check_options(const Options& options) const = 0;
  // The named state of one parameter, created on first use.
  std::map<std::string, Tensor>& state_of(const Tensor& param);

 private:
  std::string name_;
  Options defaults_;
  std::vector<ParamGroup> groups_;
  std::map<const TensorImpl*, std::map<std::string, Tensor>> state_;
};

}  // namespace kiln::optim
