// What the optimizers hand to the fused update kernels (kernels/optim.h): their parameters with
// gradients, batched by device, dtype and (Adam) step count, since one kernel call takes one of
// each. Internal to optim/.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim {

// Whether p, its gradient and its state tensors (the defined ones) can take the fused update:
// contiguous, of p's floating dtype, on p's device.
bool fusable(const Tensor& p, const Tensor& grad, std::initializer_list<const Tensor*> state = {});

// Whether `optimizer`'s step fuses on `device`: always on the CPU and when capturable; on a GPU
// only when backends::fused_optimizer_on_gpu() (they have not run on one), saying once on stderr
// that it steps op by op.
bool fuses_on(Device device, bool capturable, const char* optimizer);

struct FusedBatch {
  Device device;
  DType dtype;
  double step;  // Adam's step count of every parameter in it; 0 for SGD
  std::vector<Tensor> params, grads;
  std::vector<Tensor> state[3];  // SGD: momentum buffers; Adam: exp_avg, exp_avg_sq, max_exp_avg_sq
  std::vector<uint8_t> first;    // SGD: the buffer is new this step
  std::vector<Tensor> steps;     // a capturable Adam's step counts, on the device
  // The kernels write parameters and state in place: their version counters move as an in-place
  // op's would.
  void bump_versions() const;
  // The parameters' bytes: what the step's profiler event carries.
  int64_t param_bytes() const;
};

struct FusedBatches {
  std::vector<FusedBatch> all;
  FusedBatch& of(const Tensor& p, double step = 0);
};

// The GradScaler's flag for a capturable step of parameters on `device`: undefined (no skip), or
// an f32 [1] tensor there; else a DeviceError naming the optimizer.
Tensor checked_found_inf(const std::string& optimizer, const Tensor& found_inf, Device device);

}  // namespace kiln::optim
