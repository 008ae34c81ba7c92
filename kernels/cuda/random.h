// Random fills on the GPU from the same Philox4x32-10 stream as the CPU (core/philox.h), so a seed
// gives the same numbers on either device.
#pragma once

#include <cstdint>

#include "kiln/core/dtype.h"

namespace kiln::cuda {

// out[i] = low + (high - low) * philox_uniform(seed, offset, i) for i < n, in f32 or f64.
void uniform_fill(void* out, DType dtype, int64_t n, uint64_t seed, uint64_t offset, double low,
                  double high);

}  // namespace kiln::cuda
