// Values computed by PyTorch and stored under tests/reference/ (each file names the script that
// made it and the torch version), so a test can hold kiln to PyTorch without PyTorch installed.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/shape.h"
#include "kiln/core/tensor.h"

namespace kiln::testing {

// Parses tests/reference/<name>; a missing or malformed file is an Error naming it.
inline nlohmann::json torch_reference(const std::string& name) {
  const std::string path = std::string(KILN_TEST_REFERENCE_DIR) + "/" + name;
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

// got against PyTorch's want: each element within tol * (|want| + max |want|); NaN where want
// is NaN and infinities equal. Prints the count and the first mismatch.
inline void check_against_torch(const Tensor& got, const std::vector<double>& want, double tol) {
  const std::vector<double> g = got.cpu().tolist();
  REQUIRE(g.size() == want.size());
  double scale = 0.0;
  for (double v : want)
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool ok = std::isnan(want[i]) ? std::isnan(g[i])
                    : std::isinf(want[i])
                        ? g[i] == want[i]
                        : std::abs(g[i] - want[i]) <= tol * (std::abs(want[i]) + scale);
    if (!ok && bad++ == 0) first = i;
  }
  INFO(bad << " of " << g.size() << " differ from PyTorch; first at " << first << ": kiln "
           << (bad ? g[first] : 0.0) << " vs torch " << (bad ? want[first] : 0.0));
  CHECK(bad == 0);
}

}  // namespace kiln::testing
