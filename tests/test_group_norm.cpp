// GroupNorm and InstanceNorm1d/2d against PyTorch 1.13 (tests/reference/group_norm.json,
// make_group_norm.py): outputs, input and parameter gradients, running statistics in training and
// their use in eval; state dict names, autocast, bad shapes.
#include <catch2/catch.hpp>
#include <cmath>
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
using kiln::testing::shape_of;
using kiln::testing::torch_reference;
using nlohmann::json;

namespace {

// Runs module on the case's input, backward from its grad_output, and checks against PyTorch.
void check_case(nn::Module& module, const json& c) {
  Tensor x = tensor(doubles(c.at("input")), shape_of(c.at("shape"))).requires_grad_(true);
  const Tensor out = module.forward(x);
  check_against_torch(out, doubles(c.at("output")), 1e-12);
  mul(out, tensor(doubles(c.at("grad_output")), out.shape())).sum().backward();
  check_against_torch(x.grad(), doubles(c.at("input_grad")), 1e-12);
  for (const auto& [name, p] : module.named_parameters())
    check_against_torch(p.grad(), doubles(c.at(name + "_grad")), 1e-12);
  for (const auto& [name, b] : module.named_buffers())
    check_against_torch(b.to(DType::f64), doubles(c.at(name)), 1e-14);
}

// PyTorch's weight and bias for the affine cases (make_group_norm.py's affine()).
void set_affine(nn::Module& module, int64_t channels) {
  std::vector<double> w, b;
  for (int64_t i = 0; i < channels; ++i) {
    const double d = static_cast<double>(i);
    w.push_back(std::sin(0.9 * d + 0.2) * (1.0 + 0.5 * std::cos(0.3 * d)) + 1.5);
    b.push_back(std::sin(0.5 * d + 2.0) * (1.0 + 0.5 * std::cos(0.3 * d)));
  }
  NoGradGuard no_grad;
  module.state_dict().at("weight").copy_(tensor(w, {channels}));
  module.state_dict().at("bias").copy_(tensor(b, {channels}));
}

}  // namespace

TEST_CASE("GroupNorm and InstanceNorm equal PyTorch 1.13's: outputs, gradients, statistics") {
  const json cases = torch_reference("group_norm.json").at("cases");
  SECTION("GroupNorm, 3 groups, affine") {
    nn::GroupNorm norm(3, 6);
    norm.to(DType::f64);
    set_affine(norm, 6);
    check_case(norm, cases.at("group_norm_3"));
  }
  SECTION("GroupNorm, one group, no affine, [N, C, L]") {
    nn::GroupNorm norm(1, 6, {.affine = false});
    CHECK(norm.named_parameters().empty());
    check_case(norm, cases.at("group_norm_1_plain"));
  }
  SECTION("InstanceNorm2d, affine, tracking running statistics") {
    nn::InstanceNorm2d norm(6, {.momentum = 0.3, .affine = true, .track_running_stats = true});
    norm.to(DType::f64);
    set_affine(norm, 6);
    check_case(norm, cases.at("instance_norm_2d"));
  }
  SECTION("InstanceNorm1d, PyTorch's defaults") {
    nn::InstanceNorm1d norm(6);
    CHECK(norm.named_parameters().empty());
    CHECK(norm.named_buffers().empty());
    check_case(norm, cases.at("instance_norm_1d"));
  }
  SECTION("InstanceNorm2d in eval uses the running statistics of the step before") {
    nn::InstanceNorm2d norm(6, {.momentum = 0.3, .track_running_stats = true});
    norm.to(DType::f64);
    const json& c = cases.at("instance_norm_2d_eval");
    norm.forward(tensor(doubles(c.at("input")), shape_of(c.at("shape"))));
    norm.eval();
    check_case(norm, c);
  }
}

TEST_CASE("GroupNorm and InstanceNorm: names, autocast, refusals") {
  nn::GroupNorm norm(2, 4);
  CHECK_THAT(norm.str(), Catch::StartsWith("GroupNorm(2, 4, eps=1e-05, affine=True)\n"));
  nn::InstanceNorm2d instance(4, {.track_running_stats = true});
  const nn::StateDict state = instance.state_dict();
  CHECK(state.count("running_mean") == 1);
  CHECK(state.count("num_batches_tracked") == 1);
  CHECK(state.count("weight") == 0);
  {
    autocast amp(DType::bf16);
    CHECK(norm.forward(randn({2, 4, 3, 3})).dtype() == DType::f32);  // as PyTorch's fp32 list
  }
  const Tensor nhwc = randn({2, 4, 3, 5}).to(MemoryFormat::channels_last);
  CHECK(allclose(norm.forward(nhwc), norm.forward(nhwc.contiguous()), 1e-6, 1e-6));
  CHECK_THROWS_WITH(nn::GroupNorm(3, 4), Contains("GroupNorm") && Contains("multiple"));
  CHECK_THROWS_WITH(norm.forward(randn({2, 5, 3})), Contains("GroupNorm: expected an input"));
  CHECK_THROWS_WITH(instance.forward(randn({2, 4, 3})), Contains("InstanceNorm2d: expected a 4-D"));
  CHECK_THROWS_AS(group_norm(randn({2, 4, 3}), 2, ones({3})), ShapeError);
}
