// The negative log-likelihood family, on every device (kernels/cpu/loss.cpp,
// kernels/cuda/loss.cu). The op entry point lays log_probs out as a contiguous [N, C, S] tensor
// (S = the product of the trailing dims, 1 for [N, C]) and the targets as contiguous i64 [N, S];
// weight is a contiguous [C] tensor of log_probs' dtype, or undefined for weight 1 everywhere.
// scan_nll_targets and nll_loss_forward return host values, so on a GPU each waits for it, except
// the scan while a CUDA graph is being captured (below).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln {

struct NllTargetScan {
  int64_t bad_position = -1;  // the first target outside [0, C) that is not ignore_index, or -1
  double total_weight = 0.0;  // sum of w[target] over the targets that are not ignored
  // On a GPU, the same total as a 0-dim f64 tensor on the targets' device, NaN when a target is
  // out of range; undefined on the CPU. While this thread captures a CUDA graph the GPU's scan
  // reads nothing back (a graph cannot hold the wait): bad_position is then -1 and total_weight
  // NaN, and only this tensor holds the total, so the mean's division is the graph's own at every
  // replay, and a bad target makes the loss and gradients NaN rather than an error.
  Tensor total_weight_tensor;
};

struct LossKernels {
  NllTargetScan (*scan_nll_targets)(const Tensor& target, const Tensor& weight, int64_t num_classes,
                                    int64_t ignore_index);
  // losses[n, s] = -w[t] * log_probs[n, t, s] with t = target[n, s] (0 where t is ignore_index),
  // written only when `losses` (contiguous [N, S]) is defined. Returns the sum of the losses,
  // accumulated in double. Targets must have passed scan_nll_targets.
  double (*nll_loss_forward)(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                             int64_t ignore_index, const Tensor& losses);
  // grad_input[n, t, s] = -w[t] * grad[n, s] at each non-ignored target t = target[n, s]; the
  // other entries are left as they are (the caller passes zeros). grad is contiguous [N, S].
  void (*nll_loss_backward)(const Tensor& grad, const Tensor& target, const Tensor& weight,
                            int64_t ignore_index, const Tensor& grad_input);

  static const LossKernels cpu;
  static const LossKernels* const cuda;  // null in a build without CUDA
};

// Calls f(TypeTag<T>) for the floating dtypes, the only ones a loss is computed in; both devices'
// kernels visit through it, so they reject the same dtypes with the same message.
template <class F>
void visit_loss_dtype(DType dtype, F&& f) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<acc_type_t<T>>) {
      f(tag);
    } else {
      throw DTypeError(std::string("nll_loss: expected floating-point log-probabilities, got ") +
                       dtype_name(dtype));
    }
  });
}

}  // namespace kiln
