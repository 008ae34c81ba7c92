#include "kiln/nn/activations.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "kiln/core/error.h"
#include "kiln/ops/activation.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/softmax.h"

namespace kiln::nn {

Tensor LeakyReLU::forward(const Tensor& x) {
  return leaky_relu(x, negative_slope_);
}
std::string LeakyReLU::extra_repr() const {
  return fmt::format("negative_slope={}", negative_slope_);
}

Tensor ELU::forward(const Tensor& x) {
  return elu(x, alpha_);
}
std::string ELU::extra_repr() const {
  return fmt::format("alpha={}", alpha_);
}

Tensor Softplus::forward(const Tensor& x) {
  return softplus(x, beta_, threshold_);
}
std::string Softplus::extra_repr() const {
  return fmt::format("beta={}, threshold={}", beta_, threshold_);
}

Tensor Hardswish::forward(const Tensor& x) {
  return hardswish(x);
}

PReLU::PReLU(int64_t num_parameters, double init) {
  KILN_CHECK(num_parameters > 0, ValueError, "PReLU: num_parameters must be positive, got {}",
             num_parameters);
  weight = register_parameter("weight", full({num_parameters}, init));
}
Tensor PReLU::forward(const Tensor& x) {
  return prelu(x, weight);
}
std::string PReLU::extra_repr() const {
  return fmt::format("num_parameters={}", weight.numel());
}

Tensor Softmax::forward(const Tensor& x) {
  return softmax(x, dim_);
}
std::string Softmax::extra_repr() const {
  return fmt::format("dim={}", dim_);
}

Tensor LogSoftmax::forward(const Tensor& x) {
  return log_softmax(x, dim_);
}
std::string LogSoftmax::extra_repr() const {
  return fmt::format("dim={}", dim_);
}

}  // namespace kiln::nn
