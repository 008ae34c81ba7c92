// The reduction lab's CPU reference: each row's sum, accumulated in double. The GPU test checks
// version 0 (CUB) against it; the runner's smoke path runs it where there is no GPU.
#pragma once

#include <cstdint>

namespace kiln::lab::reduction {

// out[r] = x[r, 0] + ... + x[r, cols - 1], x row-major [rows, cols].
inline void row_sums_reference(const float* x, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += x[r * cols + c];
    out[r] = static_cast<float>(sum);
  }
}

}  // namespace kiln::lab::reduction
