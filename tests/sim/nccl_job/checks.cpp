#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "job.h"
#include "kiln/core/cuda.h"
#include "kiln/kiln.h"

namespace nccl_job {

using namespace kiln;

void expect(bool ok, const std::string& what) {
  if (!ok) throw Error("check failed: " + what);
}

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  expect(got.shape() == want.shape() && got.dtype() == want.dtype() && equal(got.cpu(), want.cpu()),
         what + ": got " + describe(got) + ", want " + describe(want));
}

void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol,
                  const std::string& what) {
  const Tensor a = got.detach().cpu().to(DType::f64), b = want.detach().cpu().to(DType::f64);
  const bool same_shape = a.shape() == b.shape();
  const double worst = same_shape && a.numel() > 0 ? abs(sub(a, b)).max().item<double>() : 0.0;
  expect(same_shape && allclose(a, b, rtol, atol),
         what + ": not within rtol " + std::to_string(rtol) + ", atol " + std::to_string(atol) +
             " (largest difference " + std::to_string(worst) + ")");
}

Device gpu() {
  return Device::cuda(cuda::current_device());
}

Tensor rank_input(int rank, int64_t numel, DType dtype) {
  std::vector<double> values(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) {
    double v = (rank + 1.0) * static_cast<double>(i % 7) - 3.0 * rank;
    if (dtype == DType::boolean) v = (i + rank) % 3 == 0 ? 1.0 : 0.0;
    if (dtype == DType::u8) v = (rank + 1.0) * static_cast<double>(i % 7);
    values[static_cast<size_t>(i)] = v;
  }
  return tensor(values).to(dtype);
}

}  // namespace nccl_job
