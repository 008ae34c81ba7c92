// Dynamic loss scaling for mixed-precision training, as PyTorch's torch.amp.GradScaler: the loss is
// multiplied by a large scale before backward so that small f16 gradients do not flush to zero;
// the gradients are unscaled before the optimizer uses them, and a step whose gradients overflowed
// (inf or NaN anywhere) is skipped and the scale backed off. After growth_interval clean steps in a
// row the scale grows again. One iteration:
//
//   optimizer.zero_grad();
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);            // optional: only to look at true gradients (clipping)
//   clip_grad_norm_(params, 1.0);
//   scaler.step(optimizer);                // skipped when a gradient overflowed
//   scaler.update();
//
// The scale is kept on the host (a float value, as PyTorch's f32 scale tensor holds it); each
// device's inf flag stays on its device until step() reads it: the one device-to-host read of an
// iteration.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/tensor.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// PyTorch's defaults.
struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  // Throws ValueError unless init_scale is positive and finite in f32, growth_factor > 1,
  // 0 < backoff_factor < 1 and growth_interval >= 1.
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale, recorded by autograd (the scale as a 0-dim f32 tensor, as PyTorch multiplies
  // by its scale tensor, so the result's dtype follows kiln's promotion); the loss itself when
  // disabled.
  Tensor scale(const Tensor& loss) const;
  // Divides the optimizer's gradients by the scale in place, in one fused pass per device that
  // also flags inf and NaN. At most once per optimizer between update()s, and not after step().
  void unscale_(Optimizer& optimizer);
  // Unscales (unless unscale_ already did), then runs optimizer.step() unless a gradient held inf
  // or NaN; returns whether it stepped. Once per optimizer between update()s. Disabled, it only
  // steps.
  bool step(Optimizer& optimizer);
  // PyTorch's _amp_update_scale_: after an overflow in any optimizer's gradients the scale is
  // multiplied by backoff_factor and the growth tracker reset; otherwise the tracker counts one
  // more clean step, and at growth_interval the scale is multiplied by growth_factor (kept only
  // when the result is finite in f32) and the tracker reset. Ends the iteration: every optimizer
  // may unscale_ and step again.
  void update();
  // Sets the scale (rounded to f32) instead, leaving the tracker as it is; ends the iteration.
  void update(double new_scale);

  double get_scale() const { return options_.enabled ? scale_ : 1.0; }
  int64_t growth_tracker() const { return options_.enabled ? growth_tracker_ : 0; }
  bool is_enabled() const { return options_.enabled; }
  double growth_factor() const { return options_.growth_factor; }
  double backoff_factor() const { return options_.backoff_factor; }
  int64_t growth_interval() const { return options_.growth_interval; }

  // PyTorch's keys as 0-dim f64 tensors: "scale", "growth_factor", "backoff_factor",
  // "growth_interval", "_growth_tracker". Empty when disabled, as in PyTorch.
  StateDict state_dict() const;
  // Restores the scale, the tracker and the three factors, all or nothing: a missing or unknown
  // key or a value out of its domain throws ValueError naming the key. Does nothing when
  // disabled; an empty state (a disabled scaler's) throws.
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct OptimizerState {
    Stage stage = Stage::ready;
    // One f32 [1] flag per device that holds gradients, on that device.
    std::vector<std::pair<Device, Tensor>> found_inf_per_device;
    // Whether any flag was set, once step() has read them.
    std::optional<bool> found_inf;
  };

  GradScalerOptions options_;
  double scale_;  // always a value of f32
  int64_t growth_tracker_ = 0;
  std::map<const Optimizer*, OptimizerState> per_optimizer_;
};

}  // namespace kiln::optim
