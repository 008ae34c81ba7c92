// kiln's cross_entropy on one device and dtype against PyTorch's values in
// tests/reference/cross_entropy.json (made by make_cross_entropy.py there): label smoothing 0, 0.1
// and 1, with and without class weights, every reduction, an ignored target, [N, C] and 4-D logits.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "parity.h"
#include "torch_reference.h"

namespace kiln::testing {

inline Reduction reduction_named(const std::string& name) {
  if (name == "none") return Reduction::none;
  if (name == "sum") return Reduction::sum;
  REQUIRE(name == "mean");
  return Reduction::mean;
}

// Each value within the table's tolerance for dtype, relative to |want| plus the largest |want|.
inline void check_cross_entropy_against_torch(Device device, DType dtype) {
  const double tol = tolerance(dtype).rtol;
  const nlohmann::json ref = torch_reference("cross_entropy.json");
  const int64_t ignore_index = ref["ignore_index"].get<int64_t>();
  for (const nlohmann::json& c : ref["cases"]) {
    const Shape shape = shape_of(c["shape"]);
    const std::string reduction = c["reduction"].get<std::string>();
    const double smoothing = c["smoothing"].get<double>();
    INFO(dtype_name(dtype) << " " << device.str() << " logits " << shape_str(shape) << " smoothing "
                           << smoothing << " weighted " << !c["weight"].is_null() << " reduction "
                           << reduction);
    Shape target_shape = shape;
    target_shape.erase(target_shape.begin() + 1);
    // A fresh leaf on the device: .to() of a tensor already there returns the tensor itself, so
    // marking that would mark (and accumulate into) the caller's tensor.
    Tensor logits = tensor(doubles(c["logits"])).reshape(shape).to(dtype).to(device).detach();
    logits.requires_grad_();
    const Tensor target = tensor(ints(c["target"])).reshape(target_shape).to(device);
    const Tensor weight =
        c["weight"].is_null() ? Tensor() : tensor(doubles(c["weight"])).to(dtype).to(device);
    const Tensor loss =
        cross_entropy(logits, target, weight, ignore_index, reduction_named(reduction), smoothing);
    const std::vector<double> grad_output = doubles(c["grad_output"]);
    loss.backward(tensor(grad_output).reshape(loss.shape()).to(dtype).to(device));
    check_against_torch(loss, doubles(c["loss"]), tol);
    REQUIRE(logits.grad().defined());
    check_against_torch(logits.grad(), doubles(c["grad"]), tol);
  }
}

}  // namespace kiln::testing
