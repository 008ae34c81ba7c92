// Gradient clipping, as torch.nn.utils.clip_grad_norm_ and clip_grad_value_: called between
// backward() and the optimizer's step (after GradScaler::unscale_ when scaling the loss).
#pragma once

#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim {

// Clamps every gradient element into [-clip_value, clip_value], on the gradients' devices.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

// Scales every gradient so that their joint p-norm is at most max_norm; returns the norm before.
// The norms are computed on the gradients' device and the host waits for it once, for the total
// (one .item()); gradients on several devices have their norms gathered on the first one's.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

}  // namespace kiln::optim
