// NaN and infinities through every elementwise op, reduction, softmax, norm and pooling on the
// GPU, against PyTorch's rules (tests/reference/nonfinite.json), as tests/test_nonfinite.cpp on
// the CPU.
#include <catch2/catch.hpp>

#include "kiln/kiln.h"
#include "nonfinite_reference.h"

using namespace kiln;

TEST_CASE("cuda nonfinite: every op keeps PyTorch's NaN and inf rules, f64 and f32") {
  kiln::testing::check_nonfinite_against_torch(Device::cuda(0), DType::f64);
  kiln::testing::check_nonfinite_against_torch(Device::cuda(0), DType::f32);
}
