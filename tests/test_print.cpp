// Tensor::str(): PyTorch's layout, with the shape, dtype, device and autograd suffix kiln adds.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>

#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;

TEST_CASE("print: whole-valued floats print with a trailing dot") {
  CHECK(tensor<float>({1, 2, 3}).str() == "tensor([1., 2., 3.], shape=[3], dtype=f32, device=cpu)");
}

TEST_CASE("print: fractional floats use four decimals, aligned") {
  CHECK(tensor<float>({1.5f, -2.25f}).str() ==
        "tensor([ 1.5000, -2.2500], shape=[2], dtype=f32, device=cpu)");
  CHECK(tensor<double>({0.125}).str() == "tensor([0.1250], shape=[1], dtype=f64, device=cpu)");
}

TEST_CASE("print: integers are right-aligned") {
  CHECK(tensor({1, -20, 3}).str() == "tensor([  1, -20,   3], shape=[3], dtype=i64, device=cpu)");
  CHECK(tensor<uint8_t>({7, 255}).str() == "tensor([  7, 255], shape=[2], dtype=u8, device=cpu)");
}

TEST_CASE("print: bools print as True and False") {
  CHECK(tensor({true, false}).str() == "tensor([ True, False], shape=[2], dtype=bool, device=cpu)");
}

TEST_CASE("print: 0-dim tensors print the bare value") {
  CHECK(scalar_tensor(2.5).str() == "tensor(2.5000, shape=[], dtype=f32, device=cpu)");
  CHECK(scalar_tensor(4, DType::i32).str() == "tensor(4, shape=[], dtype=i32, device=cpu)");
}

TEST_CASE("print: 2-D tensors put rows on their own lines") {
  CHECK(tensor({{1.f, 2.f}, {3.f, 4.f}}).str() ==
        "tensor([[1., 2.],\n"
        "        [3., 4.]], shape=[2, 2], dtype=f32, device=cpu)");
}

TEST_CASE("print: 3-D tensors separate matrices with a blank line") {
  CHECK(arange(8).view({2, 2, 2}).str() ==
        "tensor([[[0, 1],\n"
        "         [2, 3]],\n"
        "\n"
        "        [[4, 5],\n"
        "         [6, 7]]], shape=[2, 2, 2], dtype=i64, device=cpu)");
}

TEST_CASE("print: non-contiguous tensors print in logical order") {
  CHECK(arange(6).view({2, 3}).t().str() ==
        "tensor([[0, 3],\n"
        "        [1, 4],\n"
        "        [2, 5]], shape=[3, 2], dtype=i64, device=cpu)");
}

TEST_CASE("print: empty tensors") {
  CHECK(zeros({0}).str() == "tensor([], shape=[0], dtype=f32, device=cpu)");
}

TEST_CASE("print: big tensors are elided with ...") {
  std::string s = arange(2000).str();
  CHECK(s.find("...") != std::string::npos);
  CHECK(s.find("   0,    1,    2,") != std::string::npos);
  CHECK(s.find("1997, 1998, 1999]") != std::string::npos);
  CHECK(s.find("1000") == std::string::npos);
  CHECK(s.find("shape=[2000], dtype=i64") != std::string::npos);
  CHECK(s.size() < 200);
  std::string m = zeros({100, 100}).str();
  CHECK(m.find("...") != std::string::npos);
  CHECK(m.size() < 1000);
  // At the threshold nothing is elided.
  CHECK(arange(1000).str().find("...") == std::string::npos);
}

TEST_CASE("print: scientific notation for wide ranges") {
  CHECK(tensor<double>({1e-5, 1.0}).str() ==
        "tensor([1.0000e-05, 1.0000e+00], shape=[2], dtype=f64, device=cpu)");
  CHECK(tensor<double>({1e9}).str().find("1.0000e+09") != std::string::npos);
}

TEST_CASE("print: nan and inf") {
  CHECK(tensor<float>({NAN, INFINITY, -INFINITY, 1.5f}).str() ==
        "tensor([   nan,    inf,   -inf, 1.5000], shape=[4], dtype=f32, device=cpu)");
}

TEST_CASE("print: 16-bit floats name their dtype") {
  CHECK(tensor<float>({0.5f, 1.f}).to(DType::bf16).str() ==
        "tensor([0.5000, 1.0000], shape=[2], dtype=bf16, device=cpu)");
  CHECK(tensor<float>({2.f}).to(DType::f16).str() ==
        "tensor([2.], shape=[1], dtype=f16, device=cpu)");
}

TEST_CASE("print: grad_fn and requires_grad are shown") {
  Tensor x = tensor<float>({1.f, 2.f}).requires_grad_();
  CHECK(x.str() == "tensor([1., 2.], shape=[2], dtype=f32, device=cpu, requires_grad=true)");
  Tensor y = mul(x, 2.0);
  CHECK(y.str() == "tensor([2., 4.], shape=[2], dtype=f32, device=cpu, grad_fn=<MulBackward>)");
  CHECK(y.detach().str() == "tensor([2., 4.], shape=[2], dtype=f32, device=cpu)");
}
