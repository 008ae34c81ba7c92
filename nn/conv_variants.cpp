#include "kiln/nn/conv_variants.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "kiln/core/error.h"
#include "kiln/nn/init.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factories.h"

namespace kiln::nn {

namespace {

// PyTorch's reset_parameters for its convolutions: kaiming_uniform_(a = sqrt(5)) on the weight, the
// bias uniform within 1 / sqrt(fan_in), fan_in from the weight's dim 1.
void init_conv(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

void check_channels(const char* layer, int64_t in, int64_t out, int64_t groups) {
  KILN_CHECK(in > 0 && out > 0 && groups > 0 && in % groups == 0 && out % groups == 0, ValueError,
             "{}: in_channels {} and out_channels {} must be positive and divisible by groups {}",
             layer, in, out, groups);
}

std::string pair_str(Pair p) {
  return fmt::format("({}, {})", p[0], p[1]);
}

}  // namespace

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
               Conv1dOptions options)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      options_(options) {
  check_channels("Conv1d", in_channels, out_channels, options.groups);
  KILN_CHECK(kernel_size > 0, ValueError, "Conv1d: kernel_size must be positive, got {}",
             kernel_size);
  weight = register_parameter("weight",
                              empty({out_channels, in_channels / options.groups, kernel_size}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  init_conv(weight, bias);
}

Tensor Conv1d::forward(const Tensor& x) {
  return conv1d(x, weight, bias, options_.stride, options_.padding, options_.dilation,
                options_.groups);
}

std::string Conv1d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size=({},), stride=({},)", in_channels_,
                              out_channels_, kernel_size_, options_.stride);
  if (options_.padding != 0) s += fmt::format(", padding=({},)", options_.padding);
  if (options_.dilation != 1) s += fmt::format(", dilation=({},)", options_.dilation);
  if (options_.groups != 1) s += fmt::format(", groups={}", options_.groups);
  if (!options_.bias) s += ", bias=False";
  return s;
}

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Pair kernel_size,
                                 ConvTranspose2dOptions options)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      options_(options) {
  check_channels("ConvTranspose2d", in_channels, out_channels, options.groups);
  KILN_CHECK(kernel_size[0] > 0 && kernel_size[1] > 0, ValueError,
             "ConvTranspose2d: kernel_size must be positive, got {}", pair_str(kernel_size));
  weight = register_parameter("weight", empty({in_channels, out_channels / options.groups,
                                               kernel_size[0], kernel_size[1]}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  init_conv(weight, bias);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return conv_transpose2d(x, weight, bias, options_.stride, options_.padding,
                          options_.output_padding, options_.groups, options_.dilation);
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels_, out_channels_,
                              pair_str(kernel_size_), pair_str(options_.stride));
  if (options_.padding != Pair{0, 0}) s += ", padding=" + pair_str(options_.padding);
  if (options_.output_padding != Pair{0, 0})
    s += ", output_padding=" + pair_str(options_.output_padding);
  if (options_.dilation != Pair{1, 1}) s += ", dilation=" + pair_str(options_.dilation);
  if (options_.groups != 1) s += fmt::format(", groups={}", options_.groups);
  if (!options_.bias) s += ", bias=False";
  return s;
}

}  // namespace kiln::nn
