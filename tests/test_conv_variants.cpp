// conv_transpose2d and conv1d (and their modules) against PyTorch 1.13 (tests/reference/
// conv_variants.json, make_conv_variants.py): outputs and gradients of input, weight and bias;
// layouts, autocast and the refusals.
#include <catch2/catch.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "torch_reference.h"

using namespace kiln;
using Catch::Contains;
using kiln::testing::check_against_torch;
using kiln::testing::doubles;
using kiln::testing::ints;
using kiln::testing::shape_of;
using kiln::testing::torch_reference;
using nlohmann::json;

namespace {

Pair pair_of(const json& j) {
  const std::vector<int64_t> v = ints(j);
  return {v[0], v[1]};
}

}  // namespace

TEST_CASE("conv_transpose2d and conv1d equal PyTorch 1.13's: outputs and gradients") {
  const json reference = torch_reference("conv_variants.json");
  for (const json& c : reference.at("cases")) {
    INFO(c.at("op") << " " << c.at("args").dump());
    const json& a = c.at("args");
    Tensor x = tensor(doubles(c.at("x")), shape_of(c.at("x_shape"))).requires_grad_(true);
    Tensor w = tensor(doubles(c.at("w")), shape_of(c.at("w_shape"))).requires_grad_(true);
    Tensor b = tensor(doubles(c.at("b")), {a.at("bias").get<int64_t>()}).requires_grad_(true);
    const Tensor out =
        c.at("op") == "conv1d"
            ? conv1d(x, w, b, a.at("stride"), a.at("padding"), a.at("dilation"), a.at("groups"))
            : conv_transpose2d(x, w, b, pair_of(a.at("stride")), pair_of(a.at("padding")),
                               pair_of(a.at("output_padding")), a.at("groups"),
                               pair_of(a.at("dilation")));
    REQUIRE(out.shape() == shape_of(c.at("shape")));
    check_against_torch(out, doubles(c.at("output")), 1e-14);
    mul(out, tensor(doubles(c.at("grad_output")), out.shape())).sum().backward();
    check_against_torch(x.grad(), doubles(c.at("x_grad")), 1e-14);
    check_against_torch(w.grad(), doubles(c.at("w_grad")), 1e-14);
    check_against_torch(b.grad(), doubles(c.at("b_grad")), 1e-14);
  }
}

TEST_CASE("ConvTranspose2d and Conv1d modules: shapes, names, layouts, autocast, refusals") {
  manual_seed(0);
  nn::ConvTranspose2d up(4, 6, 3, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
  CHECK(up.weight.shape() == Shape{4, 3, 3, 3});
  CHECK_THAT(up.str(), Catch::StartsWith("ConvTranspose2d(4, 6, kernel_size=(3, 3), stride=(2, 2), "
                                         "padding=(1, 1), output_padding=(1, 1), groups=2)"));
  const Tensor x = randn({2, 4, 5, 5});
  const Tensor y = up.forward(x);
  CHECK(y.shape() == Shape{2, 6, 10, 10});
  CHECK(allclose(up.forward(x.to(MemoryFormat::channels_last)), y, 1e-5, 1e-5));
  {
    autocast amp(DType::bf16);
    CHECK(up.forward(x).dtype() == DType::bf16);  // PyTorch's lower-precision list
  }
  nn::Conv1d conv(4, 6, 3, {.padding = 1, .bias = false});
  CHECK(conv.weight.shape() == Shape{6, 4, 3});
  CHECK(conv.state_dict().count("bias") == 0);
  CHECK_THAT(conv.str(), Catch::StartsWith("Conv1d(4, 6, kernel_size=(3,), stride=(1,), "
                                           "padding=(1,), bias=False)"));
  CHECK(conv.forward(randn({2, 4, 7})).shape() == Shape{2, 6, 7});

  CHECK_THROWS_WITH(conv_transpose2d(x, randn({3, 2, 3, 3})),
                    Contains("conv_transpose2d: expected weight [4, O/groups"));
  CHECK_THROWS_WITH(conv_transpose2d(x, randn({4, 2, 3, 3}), Tensor(), 2, 0, 2),
                    Contains("output_padding below the stride"));
  CHECK_THROWS_WITH(conv1d(randn({2, 4}), randn({6, 4, 3})), Contains("conv1d: expected input"));
  CHECK_THROWS_WITH(nn::Conv1d(4, 6, 3, {.groups = 4}), Contains("divisible by groups"));
}
