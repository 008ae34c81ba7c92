// The mixed-precision family: GradScaler's one pass over a list of gradients, unscaling them and
// looking for overflow (kernels/cpu/amp.cpp, kernels/cuda/amp.cu), as PyTorch's
// _amp_foreach_non_finite_check_and_unscale_. optim/grad_scaler.cpp is the entry point.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

struct AmpKernels {
  // grads: contiguous f32, f64, f16 or bf16 tensors (any mix of them and of sizes, empty ones
  // included) on found_inf's device; found_inf: f32 of shape [1]. Every element is multiplied in
  // place by static_cast<float>(inv_scale), PyTorch's f32 inv_scale: in f32 for f32, f16 and
  // bf16, in f64 for f64. found_inf is set to 1 when any element is inf or NaN and otherwise left
  // as it is: the caller zeroes it, so several calls can share one flag.
  void (*unscale_and_check)(const std::vector<Tensor>& grads, double inv_scale,
                            const Tensor& found_inf);
  // The same with the factor read where the gradients are: inv_scale is a one-element f32 tensor
  // on found_inf's device (the capturable GradScaler's, which a CUDA graph holds).
  void (*unscale_and_check_on_device)(const std::vector<Tensor>& grads, const Tensor& inv_scale,
                                      const Tensor& found_inf);
  // PyTorch's _amp_update_scale_, in place on one device: scale (f32, one element) and
  // growth_tracker (i64, one element) after a step whose found_inf (f32, one element) says
  // whether a gradient overflowed: on an overflow scale *= backoff_factor and the tracker is 0;
  // else the tracker counts one more clean step, and at growth_interval scale *= growth_factor
  // (kept only when finite in f32) and the tracker is 0. The products are taken in double and
  // rounded to f32, as the host GradScaler rounds them.
  void (*update_scale)(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, int64_t growth_interval);

  static const AmpKernels cpu;
  static const AmpKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
