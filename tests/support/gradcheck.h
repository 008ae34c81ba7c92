// gradcheck: compares autograd's gradients with central differences in float64.
// An element passes when |analytic - numeric| <= atol + rtol * |numeric|.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::testing {

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatches, for INFO()
};

// f maps the inputs to any tensor; gradcheck reduces it to a scalar with fixed random weights, so
// every output element contributes. Floating inputs are converted to f64 leaves; integer inputs
// (indices, labels) pass through untouched.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps = 1e-6, double atol = 1e-5,
                          double rtol = 1e-3);

// A random f64 tensor with a fixed seed, values in [low, high).
Tensor random_f64(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0);

// The same values as `t` but laid out non-contiguously (a transposed copy transposed back).
Tensor non_contiguous(const Tensor& t);

}  // namespace kiln::testing

// CHECK_GRADCHECK(f, inputs): a Catch2 check that prints the mismatches on failure.
#define CHECK_GRADCHECK(...)                                 \
  do {                                                       \
    auto kiln_gc_ = ::kiln::testing::gradcheck(__VA_ARGS__); \
    INFO(kiln_gc_.message);                                  \
    CHECK(kiln_gc_.ok);                                      \
  } while (0)
