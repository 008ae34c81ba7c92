// TypedOptimizer<Options, Group>: an Optimizer whose groups each hold an Options struct
// (SGDOptions, AdamOptions, ...). A group is given as a Group struct, its parameters and the
// options it sets, each a std::optional that, left unset, takes the optimizer's:
//
//   optim::SGD sgd({{.params = backbone}, {.params = head, .lr = 0.01}}, {.lr = 0.1, .momentum =
//   0.9});
//
// A table of OptionFields, one per option the state dict holds, names them for the serial form
// (Optimizer::state_dict) and ties each to its override in Group; it is the one place that lists
// an optimizer's options by name.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/core/op_name.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// One option as the state dict names it: a number, or a flag (saved as 0 or 1), with the Group's
// override of it.
template <class Options, class Group>
struct OptionField {
  const char* name;
  double Options::*number = nullptr;
  std::optional<double> Group::*number_override = nullptr;
  bool Options::*flag = nullptr;
  std::optional<bool> Group::*flag_override = nullptr;
};

template <class Options, class Group>
constexpr OptionField<Options, Group> number_option(const char* name, double Options::*value,
                                                    std::optional<double> Group::*override_value) {
  return {name, value, override_value, nullptr, nullptr};
}

template <class Options, class Group>
constexpr OptionField<Options, Group> flag_option(const char* name, bool Options::*value,
                                                  std::optional<bool> Group::*override_value) {
  return {name, nullptr, nullptr, value, override_value};
}

template <class Options, class Group>
class TypedOptimizer : public Optimizer {
 public:
  using Fields = std::span<const OptionField<Options, Group>>;

  // Group `group`'s options (std::out_of_range past the last group). Change them between steps as
  // PyTorch's param_groups[g]["lr"] = ...; each step checks them first.
  Options& options(std::size_t group) { return options_.at(group); }
  const Options& options(std::size_t group) const { return options_.at(group); }

  // Adds a group: its parameters with the optimizer's options, but for those the group sets.
  // Throws ValueError (adding nothing) when the merged options are out of their domain or a
  // parameter is already optimized.
  void add_param_group(Group group) {
    Options merged = defaults_;
    for (const auto& field : fields_) {
      if (field.number && group.*field.number_override)
        merged.*field.number = *(group.*field.number_override);
      if (field.flag && group.*field.flag_override)
        merged.*field.flag = *(group.*field.flag_override);
    }
    check_options(merged);
    add_params(std::move(group.params));
    options_.push_back(merged);
  }

  double lr(std::size_t group) const override { return options(group).lr; }
  void set_lr(std::size_t group, double lr) override { options(group).lr = lr; }
  std::optional<double> cycled_momentum(std::size_t group) const override {
    if constexpr (requires(const Options& o) { o.momentum; })
      return options(group).momentum;
    else if constexpr (requires(const Options& o) { o.beta1; })
      return options(group).beta1;
    else
      return std::nullopt;
  }
  void set_cycled_momentum(std::size_t group, double momentum) override {
    if constexpr (requires(Options & o) { o.momentum; })
      options(group).momentum = momentum;
    else if constexpr (requires(Options & o) { o.beta1; })
      options(group).beta1 = momentum;
    else
      throw ValueError(fmt::format("{}: has no momentum or beta1 to set to {}", name(), momentum));
  }

  SerialOptions serial_options(std::size_t group) const override {
    const Options& o = options(group);
    SerialOptions out;
    for (const auto& field : fields_)
      out[field.name] = field.number ? o.*field.number : (o.*field.flag ? 1.0 : 0.0);
    return out;
  }

 protected:
  TypedOptimizer(std::string name, Options defaults, Fields fields, bool capturable = false)
      : Optimizer(std::move(name), capturable), defaults_(defaults), fields_(fields) {}

  // Throws ValueError naming the optimizer and the option when `options` are out of their domain.
  virtual void check_options(const Options& options) const = 0;

  // The constructors' body: checks the optimizer's options, then adds each group.
  void add_param_groups(std::vector<Group> groups) {
    KILN_CHECK(!groups.empty(), ValueError, "{}: got an empty list of parameter groups", name());
    check_options(defaults_);
    for (auto& group : groups) add_param_group(std::move(group));
  }

  // What a step calls first for each group: its options, checked.
  const Options& checked_options(std::size_t group) const {
    check_options(options(group));
    return options(group);
  }

  // update(options, param, gradient) for every parameter that has a gradient, group by group, with
  // the group's options checked first, without recording history: the loop of a step that runs op
  // by op (RMSprop, Adagrad, NAdam, RAdam).
  template <class Update>
  void for_each_gradient(const char* op_name, Update update) {
    const OpNameScope scope(op_name);
    NoGradGuard no_grad;
    for (std::size_t group = 0; group < num_param_groups(); ++group) {
      const Options& o = checked_options(group);
      for (Tensor p : params(group))
        if (const Tensor g = p.grad(); g.defined()) update(o, p, g);
    }
  }

  void load_serial_options(const std::vector<SerialOptions>& groups) override {
    KILN_CHECK(groups.size() == options_.size(), ValueError,
               "{}.load_state_dict: got options for {} parameter groups, the optimizer has {}",
               name(), groups.size(), options_.size());
    std::vector<Options> parsed = options_;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      for (const auto& [key, value] : groups[g]) {
        bool known = false;
        for (const auto& field : fields_) known = known || key == field.name;
        KILN_CHECK(known, ValueError, "{}.load_state_dict: unknown option 'param_groups.{}.{}'",
                   name(), g, key);
      }
      for (const auto& field : fields_) {
        auto it = groups[g].find(field.name);
        KILN_CHECK(it != groups[g].end(), ValueError,
                   "{}.load_state_dict: missing 'param_groups.{}.{}'", name(), g, field.name);
        if (field.number) {
          parsed[g].*field.number = it->second;
        } else {
          KILN_CHECK(it->second == 0.0 || it->second == 1.0, ValueError,
                     "{}.load_state_dict: 'param_groups.{}.{}' is a flag (0 or 1), got {}", name(),
                     g, field.name, it->second);
          parsed[g].*field.flag = it->second != 0.0;
        }
      }
      check_options(parsed[g]);
    }
    options_ = std::move(parsed);
  }

 private:
  Options defaults_;
  Fields fields_;
  std::vector<Options> options_;
};

}  // namespace kiln::optim
