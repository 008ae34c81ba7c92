// The fused optimizer updates (kernels/optim.h) against the op-by-op updates they replace: SGD in
// every combination of momentum, dampening, Nesterov and weight decay, Adam, AdamW and amsgrad,
// over several steps, within a few ulps in f32 and f64 (parameters and state: the two differ only
// where the compiler fuses a multiply and an add) and within rounding in the 16-bit floats;
// parameters at different Adam step counts, and the ones that must go op by op (bit for bit).
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;

namespace {

// Parameters of a few shapes (one empty, one large enough for several threads), and a gradient
// for each at each step, from one seed.
std::vector<Tensor> make_params(DType dtype) {
  Generator gen(3);
  std::vector<Tensor> params;
  for (const Shape& s : std::vector<Shape>{{7}, {0}, {33, 17}, {5000}, {1}})
    params.push_back(randn(s, DType::f32, Device::cpu(), &gen).to(dtype).requires_grad_());
  return params;
}

void set_grads(std::vector<Tensor>& params, int step, const std::vector<bool>& which = {}) {
  Generator gen(100 + static_cast<uint64_t>(step));
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = randn(params[i].shape(), DType::f32, Device::cpu(), &gen).to(params[i].dtype());
    params[i].set_grad(which.empty() || which[i] ? g : Tensor());
  }
}

using MakeOptimizer =
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>, bool foreach)>;

// Runs `steps` steps fused and op by op from the same start; compares parameters and state.
void compare(const MakeOptimizer& make, DType dtype, int steps,
             const std::function<std::vector<bool>(int)>& which = {}) {
  std::vector<Tensor> fused = make_params(dtype), plain = make_params(dtype);
  auto a = make(fused, true), b = make(plain, false);
  for (int s = 0; s < steps; ++s) {
    set_grads(fused, s, which ? which(s) : std::vector<bool>{});
    set_grads(plain, s, which ? which(s) : std::vector<bool>{});
    a->step();
    b->step();
  }
  // f32 and f64: the table's floor (80 and 4500 ulps) holds a few steps of one-ulp FMA differences
  // with room; in the 16-bit floats the op-by-op update rounds after each of its five or so ops,
  // every step, and the differences add up over the steps.
  const bool wide = dtype == DType::f32 || dtype == DType::f64;
  const testing::Tolerance tol = testing::tolerance(dtype).times(wide ? 1.0 : 8.0);
  for (size_t i = 0; i < fused.size(); ++i) {
    INFO("parameter " << i << ", " << dtype_name(dtype));
    testing::check_close(fused[i].detach(), plain[i].detach(), tol);
  }
  const optim::StateDict sa = a->state_dict(), sb = b->state_dict();
  REQUIRE(sa.size() == sb.size());
  for (const auto& [key, t] : sa) {
    INFO(key);
    REQUIRE(sb.count(key));
    testing::check_close(t, sb.at(key), tol);
  }
}

}  // namespace

TEST_CASE("fused SGD equals the op-by-op update") {
  struct Config {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const Config& c : std::vector<Config>{{0, 0, 0, false},
                                             {0, 0, 1e-2, false},
                                             {0.9, 0, 0, false},
                                             {0.9, 0.1, 5e-4, false},
                                             {0.9, 0, 5e-4, true}}) {
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      INFO("momentum " << c.momentum << " dampening " << c.dampening << " weight_decay "
                       << c.weight_decay << " nesterov " << c.nesterov);
      compare(
          [&](std::vector<Tensor> params, bool foreach) {
            return std::make_unique<optim::SGD>(params,
                                                optim::SGDOptions{.lr = 0.1,
                                                                  .momentum = c.momentum,
                                                                  .dampening = c.dampening,
                                                                  .weight_decay = c.weight_decay,
                                                                  .nesterov = c.nesterov,
                                                                  .foreach = foreach});
          },
          dtype, 4);
    }
  }
}

TEST_CASE("fused Adam, AdamW and amsgrad equal the op-by-op update") {
  for (bool decoupled : {false, true}) {
    for (bool amsgrad : {false, true}) {
      // Not f16: op by op, eps = 1e-8 rounds to 0 in f16 and a zero second moment gives 0 / 0
      // (the fused update computes in f32, where it does not).
      for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
        INFO((decoupled ? "AdamW" : "Adam") << (amsgrad ? " amsgrad" : ""));
        compare(
            [&](std::vector<Tensor> params, bool foreach) -> std::unique_ptr<optim::Optimizer> {
              if (decoupled)
                return std::make_unique<optim::AdamW>(
                    params,
                    optim::AdamWOptions{.lr = 1e-2, .amsgrad = amsgrad, .foreach = foreach});
              return std::make_unique<optim::Adam>(
                  params,
                  optim::AdamOptions{
                      .lr = 1e-2, .weight_decay = 1e-3, .amsgrad = amsgrad, .foreach = foreach});
            },
            dtype, 5);
      }
    }
  }
}

TEST_CASE("fused Adam: parameters at different step counts") {
  // The third parameter has no gradient on steps 1 and 3, so it falls behind the others: the
  // update batches parameters by their step count.
  compare(
      [](std::vector<Tensor> params, bool foreach) {
        return std::make_unique<optim::Adam>(params,
                                             optim::AdamOptions{.lr = 1e-2, .foreach = foreach});
      },
      DType::f32, 5,
      [](int step) {
        return std::vector<bool>{true, true, step % 2 == 0, true, true};
      });
}

TEST_CASE("fused SGD: a non-contiguous parameter goes op by op, the rest fused") {
  auto run = [](bool foreach) {
    Generator gen(5);
    // A transposed leaf: not contiguous, so the fused kernels cannot take it.
    Tensor strided = randn({6, 4}, DType::f32, Device::cpu(), &gen).t().requires_grad_();
    Tensor dense = randn({24}, DType::f32, Device::cpu(), &gen).requires_grad_();
    REQUIRE_FALSE(strided.is_contiguous());
    optim::SGD sgd({strided, dense}, {.lr = 0.1, .momentum = 0.9, .foreach = foreach});
    for (int s = 0; s < 3; ++s) {
      strided.set_grad(full_like(strided.detach(), 0.5 + s));
      dense.set_grad(full_like(dense.detach(), 1.5 - s));
      sgd.step();
    }
    return std::vector<std::vector<double>>{strided.detach().tolist(), dense.detach().tolist()};
  };
  CHECK(run(true) == run(false));
}
