// LSTM and GRU against PyTorch 1.13 (tests/reference/recurrent.json, make_recurrent.py): outputs,
// final states and the gradients of input, initial states and every parameter, through time;
// state dict names, dropout between layers, the refusals.
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "torch_reference.h"

using namespace kiln;
using Catch::Contains;
using kiln::testing::check_against_torch;
using kiln::testing::doubles;
using kiln::testing::shape_of;
using kiln::testing::torch_reference;
using nlohmann::json;

namespace {

nn::RNNOptions options_of(const json& o) {
  return {.num_layers = o.value("num_layers", int64_t{1}),
          .bias = o.value("bias", true),
          .batch_first = o.value("batch_first", false),
          .bidirectional = o.value("bidirectional", false)};
}

}  // namespace

TEST_CASE("LSTM and GRU equal PyTorch 1.13's: outputs, states and gradients through time") {
  const json reference = torch_reference("recurrent.json");
  for (const json& c : reference.at("cases")) {
    const std::string kind = c.at("kind");
    INFO(kind << " " << c.at("options").dump() << " input " << c.at("x_shape").dump());
    std::shared_ptr<nn::RecurrentBase> module;
    if (kind == "LSTM")
      module = std::make_shared<nn::LSTM>(c.at("input_size"), c.at("hidden"),
                                          options_of(c.at("options")));
    else
      module = std::make_shared<nn::GRU>(c.at("input_size"), c.at("hidden"),
                                         options_of(c.at("options")));
    module->to(DType::f64);
    nn::StateDict state;
    for (const auto& [name, p] : c.at("parameters").items())
      state[name] = tensor(doubles(p.at("value")), shape_of(p.at("shape")));
    module->load_state_dict(state);  // strict: the names are PyTorch's

    Tensor x = tensor(doubles(c.at("x")), shape_of(c.at("x_shape"))).requires_grad_(true);
    const Shape state_shape = shape_of(c.at("state_shape"));
    Tensor h0 = tensor(doubles(c.at("h0")), state_shape).requires_grad_(true);
    const bool lstm = kind == "LSTM";
    Tensor c0 = lstm ? tensor(doubles(c.at("c0")), state_shape).requires_grad_(true) : Tensor();
    const nn::RNNResult r = lstm ? static_cast<nn::LSTM&>(*module).forward(x, h0, c0)
                                 : static_cast<nn::GRU&>(*module).forward(x, h0);
    REQUIRE(r.output.shape() == shape_of(c.at("output_shape")));
    check_against_torch(r.output, doubles(c.at("output")), 1e-13);
    check_against_torch(r.h_n, doubles(c.at("h_n")), 1e-13);
    Tensor loss = add(mul(r.output, tensor(doubles(c.at("grad_output")), r.output.shape())).sum(),
                      mul(r.h_n, tensor(doubles(c.at("grad_h_n")), r.h_n.shape())).sum());
    if (lstm) {
      check_against_torch(r.c_n, doubles(c.at("c_n")), 1e-13);
      loss = add(loss, mul(r.c_n, tensor(doubles(c.at("grad_c_n")), r.c_n.shape())).sum());
    }
    loss.backward();
    check_against_torch(x.grad(), doubles(c.at("x_grad")), 1e-12);
    check_against_torch(h0.grad(), doubles(c.at("h0_grad")), 1e-12);
    if (lstm) check_against_torch(c0.grad(), doubles(c.at("c0_grad")), 1e-12);
    for (const auto& [name, p] : module->named_parameters()) {
      INFO(name);
      check_against_torch(p.grad(), doubles(c.at("parameters").at(name).at("grad")), 1e-12);
    }
  }
}

TEST_CASE("LSTM and GRU: defaults, repr, dropout between layers, autocast, refusals") {
  manual_seed(0);
  nn::LSTM lstm(8, 16, {.num_layers = 2, .dropout = 0.5});
  CHECK_THAT(lstm.str(), Catch::StartsWith("LSTM(8, 16, num_layers=2, dropout=0.5)"));
  CHECK(lstm.state_dict().count("bias_hh_l1") == 1);
  const Tensor x = randn({5, 3, 8});
  const Tensor a = lstm.forward(x), b = lstm.forward(x);
  CHECK(a.shape() == Shape{5, 3, 16});
  CHECK_FALSE(equal(a, b));  // dropout between the layers differs per call in training
  lstm.eval();
  CHECK(equal(lstm.forward(x), lstm.forward(x)));
  {
    autocast amp(DType::bf16);
    // The linears run in 16 bits, the cell's arithmetic on the f32 states (nn/recurrent.h).
    CHECK(lstm.forward(x).dtype() == DType::f32);
  }
  nn::GRU gru(8, 4, {.batch_first = true, .bidirectional = true});
  const nn::RNNResult r = gru.forward(randn({3, 5, 8}), Tensor());
  CHECK(r.output.shape() == Shape{3, 5, 8});
  CHECK(r.h_n.shape() == Shape{2, 3, 4});
  CHECK_THROWS_WITH(gru.forward(randn({3, 5, 7})), Contains("GRU: expected an input"));
  CHECK_THROWS_WITH(gru.forward(randn({3, 5, 8}), zeros({1, 3, 4})),
                    Contains("GRU: expected h0 of shape [2, 3, 4]"));
  CHECK_THROWS_WITH(nn::LSTM(8, 0), Contains("LSTM: input_size, hidden_size and num_layers"));
}
