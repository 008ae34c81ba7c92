// The fused optimizer updates: SGD's and Adam's whole update of a list of parameters in one pass
// over each parameter and its state, instead of one kernel per op of the update (on a GPU, a
// ResNet-50's SGD step was several hundred launches; kernels/cuda/optim.cu takes a few). The
// operations are optim/'s op-by-op update's, in its order, with its scalars rounded as it rounds
// them; the results still differ by an ulp or so where the compiler contracts a multiply and an
// add into one FMA in one version and not in the other (it does so within an expression, and
// across the ops of a fused loop). 16-bit parameters are updated in f32 and rounded once at the
// end, where the op-by-op update rounds after every op.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

// bias1 = 1 - beta1^t and bias2 = 1 - beta2^t for the step t all the listed parameters are at.
struct AdamStep {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool decoupled = false;  // AdamW: p *= 1 - lr * weight_decay instead of g += weight_decay * p
  bool amsgrad = false;
  double bias1 = 1, bias2 = 1;
};

// What a capturable step (optim's `capturable`, core/cuda_graph.h) reads on the parameters'
// device instead of taking from the host, so that a CUDA graph holding the step uses the values
// the device holds at each replay. Undefined tensors: the host's SgdStep or AdamStep.
struct DeviceStep {
  // f64 [2]: SGD's lr and momentum, or Adam's lr and beta1, in place of the step's; the derived
  // scalars (lr * weight_decay, 1 - beta1, the bias corrections) are computed from them there as
  // the host computes them.
  Tensor options;
  // f32 [1], the GradScaler's flag: nonzero leaves every parameter and state as it was.
  Tensor found_inf;
  // Adam: each parameter's step count before this step (0-dim f64), in the params' order. The
  // bias corrections take t = count + 1 in place of AdamStep's bias1 and bias2, and every count
  // goes up by one after the update, unless found_inf.
  std::vector<Tensor> steps;
};

struct OptimizerKernels {
  // Every list has one entry per parameter, all contiguous, of one floating dtype and on one
  // device. momentum_buffers is empty when momentum is 0; first[i] != 0 marks a buffer that is new
  // this step and takes the step's gradient as it is.
  //   d = g + weight_decay * p
  //   buf = d (first) or momentum * buf + (1 - dampening) * d;  d = d + momentum * buf (Nesterov)
  //   or buf p = p - lr * d
  void (*sgd)(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              const std::vector<Tensor>& momentum_buffers, const std::vector<uint8_t>& first,
              const SgdStep& step, const DeviceStep& device);
  // Adam and AdamW; max_exp_avg_sq is empty unless amsgrad.
  //   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
  //   p = p - lr / bias1 * m / (sqrt(max(v_max, v) or v) / sqrt(bias2) + eps)
  void (*adam)(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
               const std::vector<Tensor>& max_exp_avg_sq, const AdamStep& step,
               const DeviceStep& device);

  static const OptimizerKernels cpu;
  static const OptimizerKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
