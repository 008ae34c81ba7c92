// Values computed by PyTorch and stored under tests/reference/ (each file names the script that
// made it and the torch version), so a test can hold kiln to PyTorch without PyTorch installed.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/shape.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "parity.h"

namespace kiln::testing {

// tests/reference/, absolute (support/reference_dir.cpp).
std::string reference_dir();

// Parses tests/reference/<name>; a missing or malformed file is an Error naming it.
inline nlohmann::json torch_reference(const std::string& name) {
  const std::string path = reference_dir() + "/" + name;
  std::ifstream in(path);
  if (!in) throw Error("torch_reference: cannot open " + path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("torch_reference: " + path + " is not valid JSON: " + e.what());
  }
}

// Numbers, with "nan", "inf" and "-inf" written as strings (JSON has no literal for them).
inline std::vector<double> doubles(const nlohmann::json& j) {
  std::vector<double> v;
  for (const nlohmann::json& e : j) {
    if (!e.is_string()) {
      v.push_back(e.get<double>());
      continue;
    }
    const std::string s = e.get<std::string>();
    if (s == "nan")
      v.push_back(std::numeric_limits<double>::quiet_NaN());
    else if (s == "inf" || s == "-inf")
      v.push_back(s == "inf" ? std::numeric_limits<double>::infinity()
                             : -std::numeric_limits<double>::infinity());
    else
      throw Error("torch_reference: expected a number, \"nan\", \"inf\" or \"-inf\", got \"" + s +
                  "\"");
  }
  return v;
}
inline std::vector<int64_t> ints(const nlohmann::json& j) {
  return j.get<std::vector<int64_t>>();
}
inline Shape shape_of(const nlohmann::json& j) {
  return j.get<Shape>();
}
// A tensor the make_*.py scripts wrote as {"shape", "dtype": "f64" or "bool", "values"}.
inline Tensor tensor_of(const nlohmann::json& j) {
  const Tensor t = tensor(doubles(j.at("values")), shape_of(j.at("shape")));
  return j.at("dtype") == "bool" ? ne(t, 0.0) : t;
}

// got against PyTorch's want: each element within tol * (|want| + max |want|); NaN where want
// is NaN and infinities equal. Prints the count and the first mismatch.
inline void check_against_torch(const Tensor& got, const std::vector<double>& want, double tol) {
  INFO("against PyTorch");
  check_close(got, want, relative_to_largest(tol, want));
}

// A make_*.py case's backward: sum(out * grad_output).backward(), then the gradient of each input
// (`inputs`, by name) and of each parameter (`parameters`, name-tensor pairs such as
// named_parameters()) against the case's "input_grads" and "param_grads", within tol.
template <class Inputs, class Parameters>
void check_gradients_against_torch(const nlohmann::json& c, const Tensor& out, Inputs& inputs,
                                   const Parameters& parameters, double tol) {
  mul(out, tensor_of(c.at("grad_output"))).sum().backward();
  for (const auto& [name, g] : c.at("input_grads").items()) {
    INFO("input " << name);
    check_against_torch(inputs[name].grad(), doubles(g.at("values")), tol);
  }
  for (const auto& [name, p] : parameters) {
    INFO("parameter " << name);
    check_against_torch(p.grad(), doubles(c.at("param_grads").at(name).at("values")), tol);
  }
}

}  // namespace kiln::testing
