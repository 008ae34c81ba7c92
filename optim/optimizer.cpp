#include "kiln/optim/optimizer.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/ops/factories.h"

namespace kiln::optim {

Optimizer::Optimizer(std::string name, bool capturable)
    : name_(std::move(name)), capturable_(capturable) {}

void Optimizer::step_unless(const Tensor&) {
  throw NotImplementedError(fmt::format(
      "{}.step_unless: only a capturable optimizer skips a step on the device (make it with "
      "capturable = true)",
      name_));
}

Tensor Optimizer::device_options(std::size_t group, Device device) {
  auto key = std::make_pair(group, device.is_cuda() ? device.index : -1);
  auto it = device_options_.find(key);
  if (it != device_options_.end()) return it->second;
  KILN_CHECK(!device.is_cuda() || !cuda::is_current_stream_capturing(device.index),
             GraphCaptureError,
             "{}.step: its options' device tensor on {} is made by the first step, which must run "
             "before the capture (warm up with a few eager steps, as PyTorch's documentation asks)",
             name_, device.str());
  Tensor options = empty({2}, DType::f64, device);
  device_options_.emplace(key, options);
  refresh_device_options(group);
  return options;
}

void Optimizer::refresh_device_options(std::size_t group) {
  const double rate = lr(group), momentum = cycled_momentum(group).value_or(rate);
  for (auto& [key, tensor] : device_options_) {
    if (key.first != group) continue;
    if (key.second >= 0 && cuda::is_current_stream_capturing(key.second)) continue;
    // fill_ queues a kernel with the value as its argument: no wait for the GPU.
    tensor.select(0, 0).fill_(rate);
    tensor.select(0, 1).fill_(momentum);
  }
}

void Optimizer::copy_options_to_device() {
  for (const auto& [key, tensor] : device_options_)
    KILN_CHECK(key.second < 0 || !cuda::is_current_stream_capturing(key.second), GraphCaptureError,
               "{}.copy_options_to_device: writing the options during a capture would freeze "
               "this step's values into the graph; call it before replay() instead",
               name_);
  for (std::size_t g = 0; g < params_.size(); ++g) refresh_device_options(g);
}

void Optimizer::add_params(std::vector<Tensor> params) {
  KILN_CHECK(!params.empty(), ValueError, "{}: a parameter group has no parameters", name_);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    KILN_CHECK(p.defined() && p.is_leaf(), ValueError, "{}: can only optimize defined leaf tensors",
               name_);
    // A repeated parameter would be stepped twice per step.
    for (size_t j = 0; j < i; ++j)
      KILN_CHECK(!params[j].is_same(p), ValueError,
                 "{}: parameter {} of a group repeats parameter {}", name_, i, j);
    for (const auto& other : params_)
      for (const Tensor& q : other)
        KILN_CHECK(!q.is_same(p), ValueError, "{}: a parameter appears in more than one group",
                   name_);
  }
  params_.push_back(std::move(params));
}

std::vector<Tensor> Optimizer::all_params() const {
  std::vector<Tensor> out;
  for (const auto& group : params_) out.insert(out.end(), group.begin(), group.end());
  return out;
}

void Optimizer::zero_grad() {
  for (auto& group : params_)
    for (Tensor& p : group) p.zero_grad();
}

std::map<std::string, Tensor>& Optimizer::state_of(const Tensor& param) {
  return state_[param.impl()];
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  int64_t index = 0;
  for (size_t g = 0; g < params_.size(); ++g) {
    for (auto& [key, value] : serial_options(g))
      out[fmt::format("param_groups.{}.{}", g, key)] = scalar_tensor(value, DType::f64);
    for (const Tensor& p : params_[g]) {
      auto it = state_.find(p.impl());
      if (it != state_.end())
        for (auto& [key, t] : it->second) out[fmt::format("state.{}.{}", index, key)] = t.detach();
      ++index;
    }
  }
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  NoGradGuard no_grad;
  // Everything is read and checked before anything is replaced, so a bad state leaves the
  // optimizer as it was.
  std::vector<SerialOptions> options(params_.size());
  std::vector<std::map<std::string, Tensor>> restored;
  size_t state_keys_used = 0;
  int64_t index = 0;
  for (size_t g = 0; g < params_.size(); ++g) {
    // Each option is checked by name (missing, unknown, out of its domain) when the typed options
    // are parsed, below.
    const std::string prefix = fmt::format("param_groups.{}.", g);
    for (auto it = state.lower_bound(prefix); it != state.end() && it->first.rfind(prefix, 0) == 0;
         ++it) {
      KILN_CHECK(it->second.numel() == 1, ValueError,
                 "{}.load_state_dict: '{}' should hold one value, got shape {}", name_, it->first,
                 shape_str(it->second.shape()));
      options.at(g).emplace(it->first.substr(prefix.size()), it->second.item<double>());
    }
    for (const Tensor& p : params_[g]) {
      std::string prefix = fmt::format("state.{}.", index++);
      std::map<std::string, Tensor> named;
      for (auto it = state.lower_bound(prefix);
           it != state.end() && it->first.rfind(prefix, 0) == 0; ++it) {
        const std::string key = it->first.substr(prefix.size());
        const Tensor& saved = it->second;
        // 0-dim entries (the step count) are scalars; the rest are per element of the parameter
        // and take its dtype, as PyTorch casts them.
        bool per_element = saved.dim() > 0;
        KILN_CHECK(!per_element || saved.shape() == p.shape(), ShapeError,
                   "{}.load_state_dict: '{}' has shape {} but the parameter has {}", name_,
                   it->first, shape_str(saved.shape()), shape_str(p.shape()));
        Tensor value = per_element && is_floating(saved.dtype()) ? saved.to(p.dtype()) : saved;
        named[key] = value.to(p.device()).clone();
        ++state_keys_used;
      }
      restored.push_back(std::move(named));
    }
  }
  size_t state_keys = 0;
  for (auto it = state.lower_bound("state.");
       it != state.end() && it->first.rfind("state.", 0) == 0; ++it)
    ++state_keys;
  KILN_CHECK(state_keys == state_keys_used, ValueError,
             "{}.load_state_dict: the state has entries for parameters the optimizer does not have "
             "({} parameters)",
             name_, index);
  const std::string next_group = fmt::format("param_groups.{}.", params_.size());
  const auto after = state.lower_bound(next_group);
  KILN_CHECK(after == state.end() || after->first.rfind(next_group, 0) != 0, ValueError,
             "{}.load_state_dict: the state has more parameter groups than the optimizer ({})",
             name_, params_.size());

  // The last check: once the options are in, nothing below throws.
  load_serial_options(options);
  index = 0;
  for (size_t g = 0; g < params_.size(); ++g) {
    for (const Tensor& p : params_[g]) {
      auto& named = restored[index++];
      if (named.empty())
        state_.erase(p.impl());
      else
        state_[p.impl()] = std::move(named);
    }
  }
}

}  // namespace kiln::optim
