// The softmax lab's CPU reference: each row's softmax in double, the row's max subtracted first.
#pragma once

#include <cmath>
#include <cstdint>

namespace kiln::lab::softmax {

// y[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r), row-major [rows, cols].
inline void softmax_reference(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    double max = -INFINITY, sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) max = std::fmax(max, static_cast<double>(in[c]));
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(in[c] - max);
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = static_cast<float>(std::exp(in[c] - max) / sum);
  }
}

}  // namespace kiln::lab::softmax
