#include "parity.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <vector>

namespace kiln::testing {

Tolerance tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-12, 1e-12};
    case DType::f32:
      return {1e-5, 1e-5};
    case DType::f16:
      return {1e-3, 1e-3};
    case DType::bf16:
      return {1.6e-2, 1.6e-2};
    default:
      return kExact;
  }
}

Tolerance gradient_tolerance(DType dtype) {
  const bool narrow = dtype == DType::f16 || dtype == DType::bf16;
  return tolerance(dtype).times(narrow ? kNarrowGradientFactor : 1.0);
}

Tolerance composed_tolerance(DType dtype) {
  const bool narrow = dtype == DType::f16 || dtype == DType::bf16;
  return tolerance(dtype).times(narrow ? kNarrowGradientFactor : kWideComposedFactor);
}

Tolerance sum_tolerance(DType dtype, double terms) {
  const Tolerance floor = tolerance(dtype);
  return {floor.rtol, floor.atol * terms};
}

Tolerance relative_to_largest(double rtol, const std::vector<double>& want) {
  double largest = 0.0;
  for (double v : want)
    if (std::isfinite(v)) largest = std::max(largest, std::abs(v));
  return {rtol, rtol * largest};
}

Tolerance relative_to_largest(double rtol, const Tensor& want) {
  return relative_to_largest(rtol, want.cpu().tolist());
}

namespace {

// The comparison itself, over values already brought to the host as doubles.
void compare(const std::vector<double>& got, const std::vector<double>& want, Tolerance tol,
             const std::vector<double>* magnitude) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  double largest_error = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    if (std::isnan(w)) {
      ok = std::isnan(g);
    } else if (std::isinf(w)) {
      ok = g == w;
    } else {
      const double error = std::abs(g - w);
      const double scale = magnitude ? std::abs((*magnitude)[i]) : std::abs(w);
      ok = error <= tol.atol + tol.rtol * scale;  // false for a NaN or infinite g
      if (!std::isnan(error)) largest_error = std::max(largest_error, error);
    }
    if (!ok && bad++ == 0) first = i;
  }
  std::ostringstream report;
  report << bad << " of " << got.size() << " elements differ (rtol " << tol.rtol << ", atol "
         << tol.atol << "; largest |got - want| " << largest_error << ")";
  if (bad > 0)
    report << "; first at " << first << ": got " << got[first] << ", want " << want[first];
  INFO(report.str());
  CHECK(bad == 0);
}

}  // namespace

void check_close(const Tensor& got, const Tensor& want, Tolerance tol, const Tensor& magnitude) {
  REQUIRE(got.defined());
  REQUIRE(want.defined());
  INFO("got " << shape_str(got.shape()) << " " << dtype_name(got.dtype()) << " on "
              << got.device().str() << ", want " << shape_str(want.shape()) << " "
              << dtype_name(want.dtype()));
  REQUIRE(got.shape() == want.shape());
  if (!magnitude.defined()) {
    compare(got.cpu().tolist(), want.cpu().tolist(), tol, nullptr);
    return;
  }
  REQUIRE(magnitude.shape() == want.shape());
  const std::vector<double> scale = magnitude.cpu().tolist();
  compare(got.cpu().tolist(), want.cpu().tolist(), tol, &scale);
}

void check_close(const Tensor& got, const std::vector<double>& want, Tolerance tol) {
  REQUIRE(got.defined());
  INFO("got " << shape_str(got.shape()) << " " << dtype_name(got.dtype()) << " on "
              << got.device().str());
  compare(got.cpu().tolist(), want, tol, nullptr);
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, Tolerance tol) {
  compare(got, want, tol, nullptr);
}

void check_gpu_parity(const Tensor& gpu, const Tensor& cpu, Tolerance tol) {
  REQUIRE(gpu.defined());
  REQUIRE(cpu.defined());
  CHECK(gpu.device().is_cuda());
  CHECK(gpu.dtype() == cpu.dtype());
  check_close(gpu, cpu, tol);
}

}  // namespace kiln::testing
