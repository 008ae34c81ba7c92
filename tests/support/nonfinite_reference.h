// NaN, inf and -inf through kiln's ops on one device and dtype, against what PyTorch gives
// (tests/reference/nonfinite.json, made by make_nonfinite.py there): each case names the op, its
// inputs, its outputs, and the input gradients for a given gradient of its first output.
#pragma once

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "parity.h"
#include "torch_reference.h"

namespace kiln::testing {

using Inputs = std::vector<Tensor>;
using OpRunner = std::function<std::vector<Tensor>(const Inputs&)>;

// Each PyTorch call of make_nonfinite.py, written with kiln's ops.
inline const std::map<std::string, OpRunner>& nonfinite_ops() {
  using V = std::vector<Tensor>;
  auto one = [](Tensor (*f)(const Tensor&)) {
    return OpRunner([f](const Inputs& in) { return V{f(in[0])}; });
  };
  auto two = [](Tensor (*f)(const Tensor&, const Tensor&)) {
    return OpRunner([f](const Inputs& in) { return V{f(in[0], in[1])}; });
  };
  auto pair = [](ValuesIndices (*f)(const Tensor&, int64_t, bool)) {
    return OpRunner([f](const Inputs& in) {
      ValuesIndices r = f(in[0], 1, false);
      return V{r.values, r.indices};
    });
  };
  static const std::map<std::string, OpRunner> ops{
      {"neg", one(neg)},
      {"abs", one(abs)},
      {"sign", one(sign)},
      {"exp", one(exp)},
      {"log", one(log)},
      {"sqrt", one(sqrt)},
      {"rsqrt", one(rsqrt)},
      {"square", one(square)},
      {"reciprocal", one(reciprocal)},
      {"erf", one(erf)},
      {"sin", one(sin)},
      {"cos", one(cos)},
      {"relu", one(relu)},
      {"sigmoid", one(sigmoid)},
      {"tanh", one(tanh)},
      {"silu", one(silu)},
      {"leaky_relu", [](const Inputs& in) { return V{leaky_relu(in[0], 0.01)}; }},
      {"gelu", [](const Inputs& in) { return V{gelu(in[0])}; }},
      {"gelu_tanh", [](const Inputs& in) { return V{gelu(in[0], "tanh")}; }},
      {"clamp", [](const Inputs& in) { return V{clamp(in[0], -1.0, 1.0)}; }},
      {"clamp_min", [](const Inputs& in) { return V{clamp(in[0], 0.0, std::nullopt)}; }},
      {"pow_2", [](const Inputs& in) { return V{pow(in[0], 2.0)}; }},
      {"pow_half", [](const Inputs& in) { return V{pow(in[0], 0.5)}; }},
      {"pow_minus_1", [](const Inputs& in) { return V{pow(in[0], -1.0)}; }},
      {"isnan", one(isnan)},
      {"logical_not", one(logical_not)},
      {"add", [](const Inputs& in) { return V{add(in[0], in[1])}; }},
      {"sub", [](const Inputs& in) { return V{sub(in[0], in[1])}; }},
      {"mul", two(mul)},
      {"div", two(div)},
      {"pow", two(pow)},
      {"maximum", two(maximum)},
      {"minimum", two(minimum)},
      {"eq", two(eq)},
      {"ne", two(ne)},
      {"lt", two(lt)},
      {"le", two(le)},
      {"gt", two(gt)},
      {"ge", two(ge)},
      {"where", [](const Inputs& in) { return V{where(gt(in[0], in[1]), in[0], in[1])}; }},
      {"masked_fill", [](const Inputs& in) { return V{masked_fill(in[0], isnan(in[0]), 0.0)}; }},
      {"sum_all", [](const Inputs& in) { return V{sum(in[0])}; }},
      {"sum_dim", [](const Inputs& in) { return V{sum(in[0], {1})}; }},
      {"mean_all", [](const Inputs& in) { return V{mean(in[0])}; }},
      {"mean_dim", [](const Inputs& in) { return V{mean(in[0], {1})}; }},
      {"var_dim", [](const Inputs& in) { return V{var(in[0], {1})}; }},
      {"std_dim", [](const Inputs& in) { return V{std_dev(in[0], {1})}; }},
      {"norm2_dim", [](const Inputs& in) { return V{norm(in[0], 2.0, {1})}; }},
      {"norm1_dim", [](const Inputs& in) { return V{norm(in[0], 1.0, {1})}; }},
      {"norminf_dim",
       [](const Inputs& in) {
         return V{norm(in[0], std::numeric_limits<double>::infinity(), {1})};
       }},
      {"max_dim", pair(max)},
      {"min_dim", pair(min)},
      {"max_all", [](const Inputs& in) { return V{max(in[0])}; }},
      {"min_all", [](const Inputs& in) { return V{min(in[0])}; }},
      {"amax_dim", [](const Inputs& in) { return V{amax(in[0], {1})}; }},
      {"amin_dim", [](const Inputs& in) { return V{amin(in[0], {1})}; }},
      {"cumsum_dim", [](const Inputs& in) { return V{cumsum(in[0], 1)}; }},
      {"softmax", [](const Inputs& in) { return V{softmax(in[0], 1)}; }},
      {"log_softmax", [](const Inputs& in) { return V{log_softmax(in[0], 1)}; }},
      {"argmax_dim", [](const Inputs& in) { return V{argmax(in[0], 1)}; }},
      {"argmin_dim", [](const Inputs& in) { return V{argmin(in[0], 1)}; }},
      {"argmax_all", [](const Inputs& in) { return V{argmax(in[0])}; }},
      {"batch_norm",
       [](const Inputs& in) {
         return V{batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), true)};
       }},
      {"batch_norm_relu",
       [](const Inputs& in) {
         return V{batch_norm_relu(in[0], Tensor(), Tensor(), Tensor(), Tensor(), true)};
       }},
      {"layer_norm", [](const Inputs& in) { return V{layer_norm(in[0], {4})}; }},
      {"max_pool2d",
       [](const Inputs& in) {
         return V{max_pool2d(in[0], {2, 2})};
       }},
      {"avg_pool2d",
       [](const Inputs& in) {
         return V{avg_pool2d(in[0], {2, 2})};
       }},
      {"mse_loss", [](const Inputs& in) { return V{mse_loss(in[0], in[1], Reduction::none)}; }},
  };
  return ops;
}

// Runs every case of nonfinite.json on `device` in `dtype` (a floating type): outputs and, where
// PyTorch has them, input gradients must match with NaN where PyTorch has NaN, the same infinities,
// and finite values within the table's tolerance for dtype (relative to |want| plus the largest
// |want|).
inline void check_nonfinite_against_torch(Device device, DType dtype) {
  const double tol = tolerance(dtype).rtol;
  const nlohmann::json ref = torch_reference("nonfinite.json");
  for (const nlohmann::json& c : ref["cases"]) {
    const std::string op = c["op"].get<std::string>();
    INFO(op << " on " << device.str() << " in " << dtype_name(dtype));
    const auto runner = nonfinite_ops().find(op);
    REQUIRE(runner != nonfinite_ops().end());
    const bool differentiable = c.contains("grads");
    Inputs inputs;
    for (const nlohmann::json& in : c["inputs"]) {
      Tensor t = tensor(doubles(in["values"])).reshape(shape_of(in["shape"])).to(dtype);
      t = t.to(device).detach();
      if (differentiable) t.requires_grad_();
      inputs.push_back(t);
    }
    const std::vector<Tensor> outputs = runner->second(inputs);
    REQUIRE(outputs.size() == c["outputs"].size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      INFO("output " << i);
      check_against_torch(outputs[i], doubles(c["outputs"][i]), tol);
    }
    if (!differentiable) continue;
    const Tensor grad_output = tensor(doubles(c["grad_output"])).reshape(outputs[0].shape());
    outputs[0].backward(grad_output.to(outputs[0].dtype()).to(device));
    for (size_t i = 0; i < inputs.size(); ++i) {
      INFO("gradient of input " << i);
      if (c["grads"][i].is_null()) {
        CHECK_FALSE(inputs[i].grad().defined());
        continue;
      }
      REQUIRE(inputs[i].grad().defined());
      check_against_torch(inputs[i].grad(), doubles(c["grads"][i]), tol);
    }
  }
}

}  // namespace kiln::testing
