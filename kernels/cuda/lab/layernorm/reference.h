// The layer-norm lab's CPU reference, forward and backward, in double. With
// x_hat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps) (the biased variance of the row) and
// g = dy * weight:
//
//   y       = x_hat * weight + bias
//   dx      = rstd * (g - mean(g) - x_hat * mean(g * x_hat))      (means over the row)
//   dweight = sum over rows of dy * x_hat,   dbias = sum over rows of dy
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::lab::layernorm {

inline void forward_reference(const float* x, const float* weight, const float* bias, float eps,
                              float* y, float* mean, float* rstd, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    double sum = 0.0, squares = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += in[c];
    const double mu = sum / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) squares += (in[c] - mu) * (in[c] - mu);
    const double inv = 1.0 / std::sqrt(squares / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = static_cast<float>((in[c] - mu) * inv * weight[c] + bias[c]);
    mean[r] = static_cast<float>(mu);
    rstd[r] = static_cast<float>(inv);
  }
}

// mean and rstd as the forward wrote them; dweight and dbias are overwritten.
inline void backward_reference(const float* x, const float* weight, const float* mean,
                               const float* rstd, const float* dy, float* dx, float* dweight,
                               float* dbias, int64_t rows, int64_t cols) {
  std::vector<double> dw(static_cast<size_t>(cols), 0.0), db(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * cols;
    double mean_g = 0.0, mean_g_xhat = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double x_hat = (x[base + c] - static_cast<double>(mean[r])) * rstd[r];
      const double g = static_cast<double>(dy[base + c]) * weight[c];
      mean_g += g;
      mean_g_xhat += g * x_hat;
      dw[c] += dy[base + c] * x_hat;
      db[c] += dy[base + c];
    }
    mean_g /= static_cast<double>(cols);
    mean_g_xhat /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const double x_hat = (x[base + c] - static_cast<double>(mean[r])) * rstd[r];
      const double g = static_cast<double>(dy[base + c]) * weight[c];
      dx[base + c] = static_cast<float>(rstd[r] * (g - mean_g - x_hat * mean_g_xhat));
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    dweight[c] = static_cast<float>(dw[c]);
    dbias[c] = static_cast<float>(db[c]);
  }
}

}  // namespace kiln::lab::layernorm
