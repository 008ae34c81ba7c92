// Optimizer state dicts saved before the options were typed (kiln ea55a4f, when each group's
// options were a map of names to doubles) load into today's optimizers and step on exactly as the
// old code stepped. tests/reference/optimizer_state_before_typed_options.safetensors holds, per
// optimizer, "<name>.<state dict key>" after two steps and "<name>.param_after_<n>.<i>" (the
// parameters after steps 2 and 3), from parameters and gradients made as below.
#include <catch2/catch.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/safetensors.h"
#include "torch_reference.h"

using namespace kiln;
using namespace kiln::optim;
using kiln::testing::reference_dir;

namespace {

Tensor leaf(const Tensor& t) {
  Tensor c = t.detach().clone();
  c.requires_grad_();
  return c;
}

// The gradient of step `step` (1, 2, 3) for parameter p, as the old code's run made it.
Tensor grad_at(const Tensor& p, int step) {
  return add(mul(p.detach(), 0.5), 0.1 * step + 0.05);
}

using Make = std::function<std::unique_ptr<Optimizer>(const Tensor&, const Tensor&)>;

// Loads `name`'s saved state into the optimizer `make` builds over its parameters after step 2,
// checks step 3 against the saved result, and returns the optimizer for its options' checks.
std::unique_ptr<Optimizer> resume(const nn::TensorMap& saved, const std::string& name,
                                  const Make& make) {
  Tensor a = leaf(saved.at(name + ".param_after_2.0"));
  Tensor b = leaf(saved.at(name + ".param_after_2.1"));
  auto optimizer = make(a, b);
  StateDict state;
  const std::string prefix = name + ".";
  for (const auto& [key, t] : saved)
    if (key.rfind(prefix, 0) == 0 && key.find(".param_after_") == std::string::npos)
      state[key.substr(prefix.size())] = t;
  REQUIRE_FALSE(state.empty());
  optimizer->load_state_dict(state);
  a.set_grad(grad_at(a, 3));
  b.set_grad(grad_at(b, 3));
  optimizer->step();
  CHECK(equal(a, saved.at(name + ".param_after_3.0")));
  CHECK(equal(b, saved.at(name + ".param_after_3.1")));
  return optimizer;
}

}  // namespace

TEST_CASE("optim state: state dicts saved before typed options load and step on bit for bit") {
  const nn::TensorMap saved =
      nn::load_safetensors(reference_dir() + "/optimizer_state_before_typed_options.safetensors")
          .tensors;

  // Each optimizer is made with other options than the saved ones: loading replaces them.
  auto sgd = resume(saved, "SGD", [](const Tensor& a, const Tensor& b) {
    return std::make_unique<SGD>(std::vector<SGDParamGroup>{{.params = {a}}, {.params = {b}}},
                                 SGDOptions{.lr = 0.5});
  });
  const SGDOptions& sgd_group = dynamic_cast<SGD&>(*sgd).options(1);
  CHECK(sgd_group.lr == 0.05);
  CHECK(sgd_group.momentum == 0.9);
  CHECK(sgd_group.weight_decay == 0.01);
  CHECK(sgd_group.nesterov);

  auto adam = resume(saved, "Adam", [](const Tensor& a, const Tensor& b) {
    return std::make_unique<Adam>(std::vector<AdamParamGroup>{{.params = {a}}, {.params = {b}}});
  });
  const AdamOptions& adam_group = dynamic_cast<Adam&>(*adam).options(1);
  CHECK(adam_group.lr == 0.01);
  CHECK(adam_group.beta1 == 0.8);
  CHECK(adam_group.beta2 == 0.99);
  CHECK(adam_group.amsgrad);

  resume(saved, "AdamW", [](const Tensor& a, const Tensor& b) {
    return std::make_unique<AdamW>(std::vector<AdamParamGroup>{{.params = {a}}, {.params = {b}}});
  });
  auto rmsprop = resume(saved, "RMSprop", [](const Tensor& a, const Tensor& b) {
    return std::make_unique<RMSprop>(
        std::vector<RMSpropParamGroup>{{.params = {a}}, {.params = {b}}});
  });
  CHECK(dynamic_cast<RMSprop&>(*rmsprop).options(1).alpha == 0.9);
  CHECK(dynamic_cast<RMSprop&>(*rmsprop).options(0).centered);
  resume(saved, "Adagrad", [](const Tensor& a, const Tensor& b) {
    return std::make_unique<Adagrad>(
        std::vector<AdagradParamGroup>{{.params = {a}}, {.params = {b}}});
  });
  resume(saved, "NAdam", [](const Tensor& a, const Tensor& b) {
    return std::make_unique<NAdam>(std::vector<Tensor>{a, b});
  });
  resume(saved, "RAdam", [](const Tensor& a, const Tensor& b) {
    return std::make_unique<RAdam>(std::vector<Tensor>{a, b});
  });
}

TEST_CASE("optim state: every optimizer's serial options round-trip and name their optimizer") {
  Tensor p = zeros({2}, DType::f64).requires_grad_(true);
  const std::vector<std::unique_ptr<Optimizer>> optimizers = [&] {
    std::vector<std::unique_ptr<Optimizer>> out;
    out.push_back(std::make_unique<SGD>(std::vector<Tensor>{p}));
    out.push_back(std::make_unique<Adam>(std::vector<Tensor>{p}));
    out.push_back(std::make_unique<AdamW>(std::vector<Tensor>{p}));
    out.push_back(std::make_unique<RMSprop>(std::vector<Tensor>{p}));
    out.push_back(std::make_unique<Adagrad>(std::vector<Tensor>{p}));
    out.push_back(std::make_unique<NAdam>(std::vector<Tensor>{p}));
    out.push_back(std::make_unique<RAdam>(std::vector<Tensor>{p}));
    return out;
  }();
  for (const auto& optimizer : optimizers) {
    INFO(optimizer->name());
    const SerialOptions before = optimizer->serial_options(0);
    CHECK(before.count("lr") == 1);
    StateDict state = optimizer->state_dict();
    CHECK_NOTHROW(optimizer->load_state_dict(state));
    CHECK(optimizer->serial_options(0) == before);
    for (const auto& [key, value] : before) {
      StateDict missing = state;
      missing.erase("param_groups.0." + key);
      CHECK_THROWS_WITH(optimizer->load_state_dict(missing),
                        Catch::Contains(optimizer->name() + ".load_state_dict") &&
                            Catch::Contains("missing 'param_groups.0." + key + "'"));
    }
    StateDict unknown = state;
    unknown["param_groups.0.learning_rate"] = scalar_tensor(0.1, DType::f64);
    CHECK_THROWS_WITH(optimizer->load_state_dict(unknown),
                      Catch::Contains(optimizer->name()) &&
                          Catch::Contains("unknown option 'param_groups.0.learning_rate'"));
  }
}
