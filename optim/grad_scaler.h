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
// iteration. With `capturable` the whole iteration stays on the device instead (for a CUDA graph,
// core/cuda_graph.h): the scale and its growth tracker are tensors there, the optimizer skips a
// step there (Optimizer::step_unless), and update() is PyTorch's _amp_update_scale_ kernel.
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
  // Nothing read back to the host in scale/unscale_/step/update: the scale lives on the device of
  // the first scaled loss (made by that first scale(), which must come before a graph's capture),
  // step() needs a capturable optimizer, whose update the device skips on an overflow, and
  // returns true for "queued" (found_inf() holds the device's answer). Gradients on one device.
  bool capturable = false;
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
  // steps. Capturable: optimizer.step_unless(the flag), which the device skips, and true.
  bool step(Optimizer& optimizer);
  // PyTorch's _amp_update_scale_: after an overflow in any optimizer's gradients the scale is
  // multiplied by backoff_factor and the growth tracker reset; otherwise the tracker counts one
  // more clean step, and at growth_interval the scale is multiplied by growth_factor (kept only
  // when the result is finite in f32) and the tracker reset. Ends the iteration: every optimizer
  // may unscale_ and step again.
  void update();
  // Sets the scale (rounded to f32) instead, leaving the tracker as it is; ends the iteration.
  void update(double new_scale);

  // Capturable: read from the device (a wait for the GPU).
  double get_scale() const;
  int64_t growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  bool is_capturable() const { return options_.capturable; }
  // Capturable: the f32 [1] flag the last update() decided with (nonzero: that iteration's step was
  // skipped), on the device; undefined before the first update().
  const Tensor& found_inf() const { return last_found_inf_; }
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

  // Capturable: the scale and tracker on `device`, made from the host values at the first call.
  void make_device_state(Device device) const;

  GradScalerOptions options_;
  double scale_;  // always a value of f32; capturable: only until the device state is made
  int64_t growth_tracker_ = 0;
  std::map<const Optimizer*, OptimizerState> per_optimizer_;
  // Capturable: made by the first scale(), a const call, hence mutable.
  mutable Tensor scale_on_device_;    // 0-dim f32
  mutable Tensor tracker_on_device_;  // 0-dim i64
  Tensor last_found_inf_;
};

}  // namespace kiln::optim
