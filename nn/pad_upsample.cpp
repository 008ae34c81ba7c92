#include "kiln/nn/pad_upsample.h"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kiln::nn {

Pad2d::Pad2d(std::array<int64_t, 4> padding, PadMode mode, double value, std::string name)
    : padding_(padding), mode_(mode), value_(value), name_(std::move(name)) {}

Tensor Pad2d::forward(const Tensor& x) {
  return pad(x, std::vector<int64_t>(padding_.begin(), padding_.end()), mode_, value_);
}

std::string Pad2d::extra_repr() const {
  const std::string sizes =
      fmt::format("({}, {}, {}, {})", padding_[0], padding_[1], padding_[2], padding_[3]);
  return mode_ == PadMode::constant && name_ == "ConstantPad2d"
             ? fmt::format("padding={}, value={}", sizes, value_)
             : fmt::format("{}", sizes);
}

std::string Upsample::extra_repr() const {
  const std::string mode = options_.mode == InterpolateMode::nearest ? "nearest" : "bilinear";
  if (options_.size)
    return fmt::format("size=({}, {}), mode='{}'", (*options_.size)[0], (*options_.size)[1], mode);
  return fmt::format("scale_factor=({}, {}), mode='{}'", (*options_.scale_factor)[0],
                     (*options_.scale_factor)[1], mode);
}

}  // namespace kiln::nn
