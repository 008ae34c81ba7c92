// NaN and infinities through every elementwise op, reduction, softmax, norm and pooling on the
// CPU, against PyTorch's rules (tests/reference/nonfinite.json): a diverging model must show NaN,
// not train on, and loss scaling finds overflow through inf/NaN gradients.
#include <catch2/catch.hpp>

#include "kiln/kiln.h"
#include "nonfinite_reference.h"

using namespace kiln;

TEST_CASE("nonfinite: every op keeps PyTorch's NaN and inf rules on the CPU, f64") {
  kiln::testing::check_nonfinite_against_torch(Device::cpu(), DType::f64);
}

TEST_CASE("nonfinite: every op keeps PyTorch's NaN and inf rules on the CPU, f32") {
  kiln::testing::check_nonfinite_against_torch(Device::cpu(), DType::f32);
}
