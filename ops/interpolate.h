// Resizing, as torch.nn.functional.interpolate for 2-D images [N, C, H, W]: nearest (PyTorch's
// "nearest": the source pixel at floor(dst * scale)) and bilinear, with or without align_corners.
// Composed of index_select, mul and add, so every device and floating dtype runs it and the
// gradient is the composition's.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln {

enum class InterpolateMode { nearest, bilinear };

struct InterpolateOptions {
  std::optional<std::array<int64_t, 2>> size{};         // the output's (H, W); or
  std::optional<std::array<double, 2>> scale_factor{};  // the output is floor(in * factor)
  InterpolateMode mode = InterpolateMode::nearest;
  bool align_corners = false;  // bilinear only, as PyTorch
};

Tensor interpolate(const Tensor& x, const InterpolateOptions& options);
// "nearest" or "bilinear"; anything else is a ValueError naming interpolate.
InterpolateMode interpolate_mode(const std::string& name);

}  // namespace kiln
