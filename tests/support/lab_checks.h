// What the kernel lab's GPU tests (tests/cuda/test_lab.cpp, test_lab_attention.cpp) compare with:
// a tensor's values on the host as floats, and a tolerance check that names the first element off.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"

namespace kiln::testing {

inline std::vector<float> host_floats(const Tensor& t) {
  const Tensor c = t.to(DType::f32).cpu().contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

// Every element within atol + rtol |want|; a NaN fails.
inline void require_close(const std::vector<float>& got, const std::vector<float>& want,
                          double atol, double rtol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(diff <= atol + rtol * std::abs(static_cast<double>(want[i])))) {
      if (bad++ == 0) first_bad = i;
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements off; the first at " << first_bad
            << ": " << (bad ? got[first_bad] : 0.0f) << " against "
            << (bad ? want[first_bad] : 0.0f));
  REQUIRE(bad == 0);
}

}  // namespace kiln::testing
