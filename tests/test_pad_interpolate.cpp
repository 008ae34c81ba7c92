// pad and interpolate (and their modules) against PyTorch 1.13 (tests/reference/
// pad_interpolate.json, make_pad_interpolate.py): outputs and gradients; the refusals.
#include <array>
#include <catch2/catch.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
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

Tensor run_op(const json& c, const Tensor& x) {
  const json& a = c.at("args");
  if (c.at("op") == "pad") return pad(x, ints(a.at("pads")), pad_mode(a.at("mode")), a.at("value"));
  InterpolateOptions options{.mode = interpolate_mode(a.at("mode")),
                             .align_corners = a.at("align")};
  if (!a.at("size").is_null()) {
    const std::vector<int64_t> size = ints(a.at("size"));
    options.size = std::array<int64_t, 2>{size[0], size[1]};
  } else {
    const std::vector<double> scale = doubles(a.at("scale"));
    options.scale_factor = std::array<double, 2>{scale[0], scale[1]};
  }
  return interpolate(x, options);
}

}  // namespace

TEST_CASE("pad and interpolate equal PyTorch 1.13's: outputs and gradients") {
  const json reference = torch_reference("pad_interpolate.json");
  const Shape shape = shape_of(reference.at("shape"));
  for (const json& c : reference.at("cases")) {
    INFO(c.at("op") << " " << c.at("args").dump());
    Tensor x = tensor(doubles(reference.at("input")), shape).requires_grad_(true);
    const Tensor out = run_op(c, x);
    REQUIRE(out.shape() == shape_of(c.at("shape")));
    check_against_torch(out, doubles(c.at("output")), 1e-15);
    mul(out, tensor(doubles(c.at("grad_output")), out.shape())).sum().backward();
    check_against_torch(x.grad(), doubles(c.at("input_grad")), 1e-14);
  }
}

TEST_CASE("padding and upsampling modules; bad arguments are refused") {
  const Tensor x = randn({2, 3, 4, 5});
  CHECK(nn::ZeroPad2d(1).forward(x).shape() == Shape{2, 3, 6, 7});
  CHECK(
      equal(nn::ReflectionPad2d({1, 0, 2, 0}).forward(x), pad(x, {1, 0, 2, 0}, PadMode::reflect)));
  CHECK(nn::ConstantPad2d(2, 3.0).forward(x).max().item<double>() >= 3.0);
  CHECK(nn::ReplicationPad2d(1).str().rfind("ReplicationPad2d((1, 1, 1, 1))", 0) == 0);
  nn::Upsample up({.scale_factor = std::array<double, 2>{2, 2}, .mode = InterpolateMode::bilinear});
  CHECK(up.forward(x).shape() == Shape{2, 3, 8, 10});
  const Tensor nhwc = x.to(MemoryFormat::channels_last);
  CHECK(allclose(up.forward(nhwc), up.forward(x)));
  CHECK(interpolate(x.to(DType::bf16), {.size = std::array<int64_t, 2>{3, 3}}).dtype() ==
        DType::bf16);

  CHECK_THROWS_WITH(pad(x, {1, 2, 3}), Contains("pad: expected an even number"));
  CHECK_THROWS_WITH(pad(x, {5, 0}, PadMode::reflect),
                    Contains("reflect padding of dim 3 (size 5) must be smaller than"));
  CHECK_THROWS_WITH(pad(x, {1, 1, 1, 1, 1, 1, 1, 1}, PadMode::replicate),
                    Contains("replicate mode pads at most 3 trailing dims"));
  CHECK_THROWS_WITH(pad(x, {-3, -3}), Contains("leaves nothing"));
  CHECK_THROWS_WITH(pad_mode("mirror"), Contains("pad: expected mode"));
  CHECK_THROWS_WITH(interpolate(x, {}), Contains("interpolate: give either size or scale_factor"));
  CHECK_THROWS_WITH(interpolate(x, {.size = std::array<int64_t, 2>{2, 2}, .align_corners = true}),
                    Contains("align_corners applies to bilinear only"));
  CHECK_THROWS_WITH(interpolate(randn({3, 4, 5}), {.size = std::array<int64_t, 2>{2, 2}}),
                    Contains("interpolate: expected a 4-D input"));
  CHECK_THROWS_WITH(interpolate(x, {.scale_factor = std::array<double, 2>{0.1, 1}}),
                    Contains("sizes must be positive"));
}
