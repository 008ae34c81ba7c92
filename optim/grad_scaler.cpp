#include "kiln/optim/grad_scaler.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/core/op_name.h"
#include "kiln/core/profiler.h"
#include "kiln/kernels/amp.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"

namespace kiln::optim {

namespace {

// PyTorch keeps the scale in an f32 tensor: every value it takes is rounded to f32.
double to_f32(double value) {
  return static_cast<double>(static_cast<float>(value));
}

// The option checks of the constructor and of load_state_dict, which name the scale differently
// ("init_scale", "scale"); the other names are the state's keys too.
void check_options(const char* where, const char* scale_name, double scale, double growth_factor,
                   double backoff_factor, double growth_interval) {
  KILN_CHECK(std::isfinite(to_f32(scale)) && to_f32(scale) > 0, ValueError,
             "{}: {} must be positive and finite in f32, got {}", where, scale_name, scale);
  KILN_CHECK(growth_factor > 1 && std::isfinite(growth_factor), ValueError,
             "{}: growth_factor must be finite and greater than 1, got {}", where, growth_factor);
  KILN_CHECK(backoff_factor > 0 && backoff_factor < 1, ValueError,
             "{}: backoff_factor must be in (0, 1), got {}", where, backoff_factor);
  KILN_CHECK(growth_interval >= 1, ValueError, "{}: growth_interval must be at least 1, got {}",
             where, growth_interval);
}

// The gradients of an optimizer's parameters, grouped by device in order of first appearance.
std::vector<std::pair<Device, std::vector<Tensor>>> grads_by_device(const Optimizer& optimizer) {
  std::vector<std::pair<Device, std::vector<Tensor>>> out;
  for (std::size_t group = 0; group < optimizer.num_param_groups(); ++group) {
    for (const Tensor& p : optimizer.params(group)) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      KILN_CHECK(is_floating(g.dtype()), DTypeError,
                 "GradScaler.unscale_: expected floating gradients, got {} for a parameter of {}",
                 describe(g), optimizer.name());
      auto it = out.begin();
      while (it != out.end() && !(it->first == g.device())) ++it;
      if (it == out.end()) it = out.insert(out.end(), {g.device(), {}});
      it->second.push_back(g);
    }
  }
  return out;
}

const char* kStates[] = {"scale", "growth_factor", "backoff_factor", "growth_interval",
                         "_growth_tracker"};

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), scale_(to_f32(options.init_scale)) {
  check_options("GradScaler", "init_scale", options.init_scale, options.growth_factor,
                options.backoff_factor, static_cast<double>(options.growth_interval));
}

void GradScaler::make_device_state(Device device) const {
  if (scale_on_device_.defined()) {
    KILN_CHECK(scale_on_device_.device() == device, DeviceError,
               "GradScaler: the capturable scale lives on {}, but this loss is on {} (a "
               "capturable GradScaler works on one device)",
               scale_on_device_.device().str(), device.str());
    return;
  }
  KILN_CHECK(!device.is_cuda() || !cuda::is_current_stream_capturing(device.index),
             GraphCaptureError,
             "GradScaler.scale: a capturable GradScaler puts its scale on the device at its first "
             "scale(), which must run before the capture (warm up with a few eager steps, as "
             "PyTorch's documentation asks)");
  NoGradGuard no_grad;
  scale_on_device_ = full({}, scale_, DType::f32, device);
  tracker_on_device_ = full({}, static_cast<double>(growth_tracker_), DType::i64, device);
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_on_device_.defined() ? scale_on_device_.item<double>() : scale_;
}

int64_t GradScaler::growth_tracker() const {
  if (!options_.enabled) return 0;
  return tracker_on_device_.defined() ? tracker_on_device_.item<int64_t>() : growth_tracker_;
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  KILN_CHECK(loss.defined() && is_floating(loss.dtype()), DTypeError,
             "GradScaler.scale: expected a floating loss tensor, got {}", describe(loss));
  if (options_.capturable) {
    make_device_state(loss.device());
    return mul(loss, scale_on_device_);
  }
  return mul(loss, scalar_tensor(scale_, DType::f32, loss.device()));
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  const OpNameScope op_name("GradScaler.unscale_");
  OptimizerState& state = per_optimizer_[&optimizer];
  KILN_CHECK(state.stage != Stage::unscaled, Error,
             "GradScaler.unscale_: already called on this {} since the last update()",
             optimizer.name());
  KILN_CHECK(state.stage != Stage::stepped, Error,
             "GradScaler.unscale_: called after step() on this {}; unscale_ comes before step(), "
             "and update() starts the next iteration",
             optimizer.name());
  NoGradGuard no_grad;
  std::vector<std::pair<Device, Tensor>> found_infs;
  auto by_device = grads_by_device(optimizer);
  // Capturable: PyTorch's inv_scale, 1 / scale in f64 rounded to f32, made on the device.
  Tensor inv_scale;
  if (options_.capturable && !by_device.empty()) {
    KILN_CHECK(by_device.size() == 1, DeviceError,
               "GradScaler.unscale_: a capturable GradScaler works on one device, but the "
               "gradients of this {} are on {} devices",
               optimizer.name(), by_device.size());
    KILN_CHECK(scale_on_device_.defined(), Error,
               "GradScaler.unscale_: no loss was scaled yet (scale() puts a capturable "
               "GradScaler's scale on the device)");
    inv_scale = reciprocal(scale_on_device_.to(DType::f64)).to(DType::f32);
  }
  for (auto& [device, grads] : by_device) {
    // The kernels want contiguous gradients: any other is unscaled in a copy and copied back.
    std::vector<Tensor> contiguous;
    for (const Tensor& g : grads) contiguous.push_back(g.contiguous());
    Tensor found_inf = zeros({1}, DType::f32, device);
    int64_t bytes = 0;
    for (const Tensor& g : contiguous)
      bytes += g.numel() * static_cast<int64_t>(dtype_size(g.dtype()));
    profiler::OpScope event("GradScaler::unscale_", device, bytes);
    if (inv_scale.defined())
      kernels_for<AmpKernels>("GradScaler.unscale_", device)
          .unscale_and_check_on_device(contiguous, inv_scale, found_inf);
    else
      kernels_for<AmpKernels>("GradScaler.unscale_", device)
          .unscale_and_check(contiguous, 1.0 / scale_, found_inf);
    for (size_t i = 0; i < grads.size(); ++i) {
      if (contiguous[i].is_same(grads[i]))
        grads[i].storage()->bump_version();  // written in place behind the version counter
      else
        grads[i].copy_(contiguous[i]);
    }
    found_infs.emplace_back(device, std::move(found_inf));
  }
  state.found_inf_per_device = std::move(found_infs);
  state.stage = Stage::unscaled;
}

bool GradScaler::step(Optimizer& optimizer) {
  const OpNameScope op_name("GradScaler.step");
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  KILN_CHECK(!options_.capturable || optimizer.capturable(), ValueError,
             "GradScaler.step: a capturable GradScaler skips an overflowing step on the device, "
             "which needs a capturable {} (its options' capturable = true)",
             optimizer.name());
  // A reference into the map stays valid while unscale_ works on the same entry.
  OptimizerState& state = per_optimizer_[&optimizer];
  KILN_CHECK(state.stage != Stage::stepped, Error,
             "GradScaler.step: already called on this {} since the last update()",
             optimizer.name());
  if (state.stage == Stage::ready) unscale_(optimizer);
  KILN_CHECK(!state.found_inf_per_device.empty(), ValueError,
             "GradScaler.step: no parameter of this {} has a gradient (call backward on "
             "scale(loss) first)",
             optimizer.name());
  if (options_.capturable) {
    optimizer.step_unless(state.found_inf_per_device.front().second);
    state.stage = Stage::stepped;
    return true;
  }
  bool found = false;
  for (const auto& [device, flag] : state.found_inf_per_device)
    found = flag.item<float>() != 0.0f || found;
  state.found_inf = found;
  if (!found) optimizer.step();
  state.stage = Stage::stepped;
  return !found;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  const OpNameScope op_name("GradScaler.update");
  if (options_.capturable) {
    // PyTorch's: the flags of every optimizer added up, and the scale updated where it lives.
    NoGradGuard no_grad;
    Tensor found;
    for (const auto& [optimizer, state] : per_optimizer_)
      for (const auto& [device, flag] : state.found_inf_per_device)
        found = found.defined() ? add(found, flag) : flag;
    KILN_CHECK(found.defined(), Error,
               "GradScaler.update: no inf checks were recorded since the last update() (call "
               "step() or unscale_() first)");
    kernels_for<AmpKernels>("GradScaler.update", scale_on_device_.device())
        .update_scale(scale_on_device_, tracker_on_device_, found, options_.growth_factor,
                      options_.backoff_factor, options_.growth_interval);
    last_found_inf_ = found;
    per_optimizer_.clear();
    return;
  }
  bool found = false, recorded = false;
  for (const auto& [optimizer, state] : per_optimizer_) {
    recorded = recorded || !state.found_inf_per_device.empty();
    if (state.found_inf) {
      found = found || *state.found_inf;
    } else {
      // unscale_ without step(): the flags have not been read yet.
      for (const auto& [device, flag] : state.found_inf_per_device)
        found = found || flag.item<float>() != 0.0f;
    }
  }
  KILN_CHECK(recorded, Error,
             "GradScaler.update: no inf checks were recorded since the last update() (call "
             "step() or unscale_() first)");
  if (found) {
    scale_ = to_f32(scale_ * options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (growth_tracker_ + 1 == options_.growth_interval) {
    const float grown = static_cast<float>(scale_ * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    ++growth_tracker_;
  }
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  const double scale = to_f32(new_scale);
  KILN_CHECK(std::isfinite(scale) && scale > 0, ValueError,
             "GradScaler.update: the new scale must be positive and finite in f32, got {}",
             new_scale);
  scale_ = scale;
  if (scale_on_device_.defined()) scale_on_device_.fill_(scale);
  per_optimizer_.clear();
}

StateDict GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {
      {"scale", scalar_tensor(get_scale(), DType::f64)},
      {"growth_factor", scalar_tensor(options_.growth_factor, DType::f64)},
      {"backoff_factor", scalar_tensor(options_.backoff_factor, DType::f64)},
      {"growth_interval", scalar_tensor(static_cast<double>(options_.growth_interval), DType::f64)},
      {"_growth_tracker", scalar_tensor(static_cast<double>(growth_tracker()), DType::f64)}};
}

void GradScaler::load_state_dict(const StateDict& state) {
  if (!options_.enabled) return;
  KILN_CHECK(!state.empty(), ValueError,
             "GradScaler.load_state_dict: the state is empty, as a disabled GradScaler saves it");
  for (const auto& [key, t] : state) {
    bool known = false;
    for (const char* k : kStates) known = known || key == k;
    KILN_CHECK(known, ValueError,
               "GradScaler.load_state_dict: unknown key '{}' (expected 'scale', 'growth_factor', "
               "'backoff_factor', 'growth_interval' and '_growth_tracker')",
               key);
  }
  auto value = [&](const char* key) {
    auto it = state.find(key);
    KILN_CHECK(it != state.end(), ValueError, "GradScaler.load_state_dict: missing '{}'", key);
    KILN_CHECK(it->second.defined() && it->second.numel() == 1, ValueError,
               "GradScaler.load_state_dict: '{}' should hold one value, got {}", key,
               describe(it->second));
    return it->second.item<double>();
  };
  // A whole number in [low, high), or an error naming the key.
  auto whole = [&](const char* key, double low, double high) {
    const double v = value(key);
    KILN_CHECK(std::floor(v) == v && v >= low && v < high, ValueError,
               "GradScaler.load_state_dict: '{}' must be a whole number in [{}, {}), got {}", key,
               low, high, v);
    return static_cast<int64_t>(v);
  };
  const double scale = value("scale");
  const double growth_factor = value("growth_factor");
  const double backoff_factor = value("backoff_factor");
  // Below 2^53, where a double still holds every whole number.
  const int64_t growth_interval = whole("growth_interval", 1, 0x1p53);
  // The tracker resets when it reaches the interval, so a saved one is always below it.
  const int64_t tracker = whole("_growth_tracker", 0, static_cast<double>(growth_interval));
  check_options("GradScaler.load_state_dict", "scale", scale, growth_factor, backoff_factor,
                static_cast<double>(growth_interval));
  options_.init_scale = scale;
  options_.growth_factor = growth_factor;
  options_.backoff_factor = backoff_factor;
  options_.growth_interval = growth_interval;
  scale_ = to_f32(scale);
  growth_tracker_ = tracker;
  if (scale_on_device_.defined()) {
    scale_on_device_.fill_(scale_);
    tracker_on_device_.fill_(static_cast<double>(tracker));
  }
}

}  // namespace kiln::optim
