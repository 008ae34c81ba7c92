#include "kiln/nn/init.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"

namespace kiln::nn::init {

std::pair<int64_t, int64_t> fans(const Tensor& t) {
  KILN_CHECK(t.dim() >= 2, ShapeError,
             "init: fan in and fan out need a tensor of at least 2 dims, got shape {}",
             shape_str(t.shape()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.shape()[d];
  return {t.shape()[1] * receptive, t.shape()[0] * receptive};
}

double calculate_gain(const std::string& nonlinearity, double param) {
  for (const char* identity : {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                               "conv_transpose2d", "conv_transpose3d", "sigmoid"})
    if (nonlinearity == identity) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nonlinearity == "selu") return 0.75;
  throw ValueError(fmt::format("calculate_gain: unknown nonlinearity '{}'", nonlinearity));
}

void uniform_(Tensor& t, double low, double high, Generator* generator) {
  NoGradGuard no_grad;
  t.copy_(uniform(t.shape(), low, high, t.dtype(), t.device(), generator));
}

void normal_(Tensor& t, double mean, double std, Generator* generator) {
  NoGradGuard no_grad;
  t.copy_(add(mul(randn(t.shape(), t.dtype(), t.device(), generator), std), mean));
}

void constant_(Tensor& t, double value) {
  NoGradGuard no_grad;
  t.fill_(value);
}
void zeros_(Tensor& t) {
  constant_(t, 0.0);
}
void ones_(Tensor& t) {
  constant_(t, 1.0);
}

namespace {
double kaiming_std(const Tensor& t, double a, const std::string& mode,
                   const std::string& nonlinearity) {
  KILN_CHECK(mode == "fan_in" || mode == "fan_out", ValueError,
             "kaiming init: mode must be fan_in or fan_out, got '{}'", mode);
  auto [fan_in, fan_out] = fans(t);
  double fan = static_cast<double>(mode == "fan_in" ? fan_in : fan_out);
  return calculate_gain(nonlinearity, a) / std::sqrt(fan);
}
}  // namespace

void kaiming_uniform_(Tensor& t, double a, const std::string& mode, const std::string& nonlinearity,
                      Generator* generator) {
  double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nonlinearity);
  uniform_(t, -bound, bound, generator);
}

void kaiming_normal_(Tensor& t, double a, const std::string& mode, const std::string& nonlinearity,
                     Generator* generator) {
  normal_(t, 0.0, kaiming_std(t, a, mode, nonlinearity), generator);
}

void xavier_uniform_(Tensor& t, double gain, Generator* generator) {
  auto [fan_in, fan_out] = fans(t);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  uniform_(t, -bound, bound, generator);
}

void xavier_normal_(Tensor& t, double gain, Generator* generator) {
  auto [fan_in, fan_out] = fans(t);
  normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), generator);
}

}  // namespace kiln::nn::init
