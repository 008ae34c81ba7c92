// The autocast policy checked op by op on one device: the CPU test (test_autocast) and the GPU test
// (cuda/test_autocast) run the same expectations.
#pragma once

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"

namespace kiln::testing {

// Under autocast(lower) on `device`: each op class's output dtype, and each result within the
// lower type's tolerance of the same op computed in f32 outside the scope.
void check_autocast_policy(Device device, DType lower);

// A small conv/batch-norm/linear model's step under autocast(lower) on `device`: logits in lower,
// loss in f32, every parameter's gradient in f32 and close to the f32 step's.
void check_autocast_training_step(Device device, DType lower);

}  // namespace kiln::testing
