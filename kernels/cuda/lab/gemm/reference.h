// The GEMM labs' CPU reference (f32 and tensor-core): C = A . B, row-major, accumulated in double.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::lab::gemm {

// A [m, k], B [k, n], C [m, n]; TA, TB anything convertible to double (float, kiln's BFloat16
// and Half).
template <class TA, class TB>
void gemm_reference(const TA* a, const TB* b, float* c, int64_t m, int64_t n, int64_t k) {
  std::vector<double> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t p = 0; p < k; ++p) {
      const double a_ip = static_cast<double>(static_cast<float>(a[i * k + p]));
      for (int64_t j = 0; j < n; ++j) row[j] += a_ip * static_cast<float>(b[p * n + j]);
    }
    for (int64_t j = 0; j < n; ++j) c[i * n + j] = static_cast<float>(row[j]);
  }
}

}  // namespace kiln::lab::gemm
