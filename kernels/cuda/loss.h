// CUDA negative log-likelihood kernels: the twins of kernels/cpu/loss.h, with the same layout
// contract ([N, C, S] log-probabilities, i64 [N, S] targets, an optional [C] weight of the
// input's dtype). scan_nll_targets and nll_loss_forward return host values, so each waits for
// the GPU (one small copy of per-block partial results).
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"
#include "kiln/kernels/cpu/loss.h"
#include "kiln/kernels/cuda/gpu.h"

namespace kiln::gpu {

#if KILN_WITH_CUDA
cpu::NllTargetScan scan_nll_targets(const Tensor& target, const Tensor& weight, int64_t num_classes,
                                    int64_t ignore_index);
double nll_loss_forward(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                        int64_t ignore_index, const Tensor& losses);
void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& weight,
                       int64_t ignore_index, const Tensor& grad_input);
#else
[[noreturn]] inline cpu::NllTargetScan scan_nll_targets(const Tensor&, const Tensor&, int64_t,
                                                        int64_t) {
  not_built("nll_loss");
}
[[noreturn]] inline double nll_loss_forward(const Tensor&, const Tensor&, const Tensor&, int64_t,
                                            const Tensor&) {
  not_built("nll_loss");
}
[[noreturn]] inline void nll_loss_backward(const Tensor&, const Tensor&, const Tensor&, int64_t,
                                           const Tensor&) {
  not_built("nll_loss");
}
#endif

}  // namespace kiln::gpu
