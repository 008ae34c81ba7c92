// Weight initialisation, as torch.nn.init: each fills a tensor in place without recording history.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "kiln/core/generator.h"
#include "kiln/core/tensor.h"

namespace kiln::nn::init {

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (for Linear and Conv).
std::pair<int64_t, int64_t> fans(const Tensor& t);
// The gain of torch.nn.init.calculate_gain for "linear", "conv1d/2d/3d", "conv_transpose1d/2d/3d",
// "sigmoid", "tanh", "relu", "leaky_relu" (with param the negative slope) and "selu".
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

void uniform_(Tensor& t, double low, double high, Generator* generator = nullptr);
void normal_(Tensor& t, double mean, double std, Generator* generator = nullptr);
void constant_(Tensor& t, double value);
void zeros_(Tensor& t);
void ones_(Tensor& t);
// mode: "fan_in" or "fan_out"; a is the negative slope for leaky_relu.
void kaiming_uniform_(Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                      const std::string& nonlinearity = "leaky_relu",
                      Generator* generator = nullptr);
void kaiming_normal_(Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                     const std::string& nonlinearity = "leaky_relu",
                     Generator* generator = nullptr);
void xavier_uniform_(Tensor& t, double gain = 1.0, Generator* generator = nullptr);
void xavier_normal_(Tensor& t, double gain = 1.0, Generator* generator = nullptr);

}  // namespace kiln::nn::init
