// kiln-demo: a two-hidden-layer MLP learns y = sin(3 x0) cos(2 x1) from 1024 random points with
// autograd and plain SGD with momentum, printing its loss as it falls. The main job until the
// ResNet trainer (apps/train) lands.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

namespace {

struct Mlp {
  std::vector<Tensor> params;  // w1, b1, w2, b2, w3, b3

  explicit Mlp(int64_t hidden) {
    Generator gen(7);
    auto layer = [&](int64_t in, int64_t out) {
      // PyTorch's default Linear init: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
      double bound = 1.0 / std::sqrt(static_cast<double>(in));
      params.push_back(
          uniform({out, in}, -bound, bound, DType::f32, Device::cpu(), &gen).requires_grad_());
      params.push_back(
          uniform({out}, -bound, bound, DType::f32, Device::cpu(), &gen).requires_grad_());
    };
    layer(2, hidden);
    layer(hidden, hidden);
    layer(hidden, 1);
  }

  Tensor forward(const Tensor& x) const {
    Tensor h = tanh(linear(x, params[0], params[1]));
    h = tanh(linear(h, params[2], params[3]));
    return linear(h, params[4], params[5]);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return apps::run_main("kiln-demo", [&] {
    int steps = argc > 1 ? std::atoi(argv[1]) : 600;
    Generator data_gen(1);
    Tensor x = uniform({1024, 2}, -1.0, 1.0, DType::f32, Device::cpu(), &data_gen);
    Tensor y = mul(sin(mul(x.select(1, 0), 3.0)), cos(mul(x.select(1, 1), 2.0))).unsqueeze(1);

    Mlp model(64);
    std::vector<Tensor> velocity;
    for (const Tensor& p : model.params) velocity.push_back(zeros_like(p));
    const double lr = 0.1, momentum = 0.9;

    std::printf(
        "kiln-demo: MLP 2-64-64-1 fitting sin(3 x0) cos(2 x1) on %s, %d steps of SGD "
        "(lr %.2f, momentum %.1f)\n",
        Device::cpu().str().c_str(), steps, lr, momentum);
    double first = 0, last = 0;
    for (int step = 0; step <= steps; ++step) {
      Tensor loss = mse_loss(model.forward(x), y);
      for (Tensor& p : model.params) p.zero_grad();
      loss.backward();
      {
        NoGradGuard no_grad;
        for (size_t i = 0; i < model.params.size(); ++i) {
          velocity[i].mul_(momentum).add_(model.params[i].grad());
          model.params[i].add_(velocity[i], -lr);
        }
      }
      last = loss.item<double>();
      if (step == 0) first = last;
      if (step % 50 == 0) std::printf("step %4d  loss %.6f\n", step, last);
    }
    std::printf("loss fell from %.6f to %.6f (%.1fx)\n", first, last, first / last);
    return last < first ? 0 : 1;
  });
}
