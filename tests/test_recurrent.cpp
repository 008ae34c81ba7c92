// LSTM and GRU against PyTorch 1.13 (tests/reference/recurrent.json, make_recurrent.py): outputs,
// final states and the gradients of input, initial states and every parameter, through time;
// state dict names, dropout between layers, the refusals; each with the fused cells
// (ops/rnn_cell.h, the CPU's default) and composed; the fused cells against the composed ones.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gradcheck.h"
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

// Sets backends::fused_rnn_cell_enabled for a scope.
class FusedCells {
 public:
  explicit FusedCells(bool on) : previous_(backends::fused_rnn_cell_enabled()) {
    backends::set_fused_rnn_cell_enabled(on);
  }
  ~FusedCells() { backends::set_fused_rnn_cell_enabled(previous_); }
  FusedCells(const FusedCells&) = delete;
  FusedCells& operator=(const FusedCells&) = delete;

 private:
  bool previous_;
};

nn::RNNOptions options_of(const json& o) {
  return {.num_layers = o.value("num_layers", int64_t{1}),
          .bias = o.value("bias", true),
          .batch_first = o.value("batch_first", false),
          .bidirectional = o.value("bidirectional", false)};
}

}  // namespace

TEST_CASE("LSTM and GRU equal PyTorch 1.13's: outputs, states and gradients through time") {
  const json reference = torch_reference("recurrent.json");
  for (const bool fused : {true, false}) {
    INFO((fused ? "fused cells" : "composed cells"));
    const FusedCells cells(fused);
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

namespace {

struct CellRun {
  std::vector<Tensor> outputs, grads;
};

// One LSTM (gates 4) or GRU (3) cell, fused or composed, and the gradients of its inputs from
// fixed upstream gradients; with create_graph, the gradients are differentiated again with respect
// to the inputs (a weighted sum of them), as double backward does.
CellRun run_cell(bool lstm, bool fused, DType dtype, bool twice) {
  const int64_t gates = lstm ? 4 : 3;
  std::vector<Tensor> in = {kiln::testing::random_f64({3, gates * 5}, 1, -2.0, 2.0),
                            kiln::testing::random_f64({3, gates * 5}, 2, -2.0, 2.0),
                            kiln::testing::random_f64({3, 5}, 3)};
  for (Tensor& t : in) t = t.to(dtype).requires_grad_(true);
  std::vector<Tensor> out;
  if (lstm) {
    const LstmCellState s =
        fused ? fused_lstm_cell(in[0], in[1], in[2]) : composed_lstm_cell(in[0], in[1], in[2]);
    out = {s.h, s.c};
  } else {
    out = {fused ? fused_gru_cell(in[0], in[1], in[2]) : composed_gru_cell(in[0], in[1], in[2])};
  }
  Tensor loss = zeros({}, dtype);
  for (size_t i = 0; i < out.size(); ++i)
    loss =
        add(loss, mul(out[i], kiln::testing::random_f64(out[i].shape(), 10 + i).to(dtype)).sum());
  std::vector<Tensor> grads = autograd::grad({loss}, in, {}, {.create_graph = twice});
  if (twice) {
    Tensor second = zeros({}, dtype);
    for (size_t i = 0; i < grads.size(); ++i)
      second =
          add(second,
              mul(grads[i], kiln::testing::random_f64(grads[i].shape(), 20 + i).to(dtype)).sum());
    grads = autograd::grad({second}, in);
  }
  return {out, grads};
}

}  // namespace

TEST_CASE("fused LSTM and GRU cells equal the composed cells: forward, backward, double backward") {
  for (const bool lstm : {true, false}) {
    for (const DType dtype : {DType::f64, DType::f32}) {
      for (const bool twice : {false, true}) {
        INFO((lstm ? "LSTM" : "GRU") << " " << dtype_name(dtype) << (twice ? " twice" : ""));
        const CellRun fused = run_cell(lstm, true, dtype, twice);
        const CellRun composed = run_cell(lstm, false, dtype, twice);
        const double tol = dtype == DType::f64 ? 1e-14 : 1e-6;
        for (size_t i = 0; i < fused.outputs.size(); ++i) {
          CHECK(fused.outputs[i].dtype() == dtype);
          CHECK(allclose(fused.outputs[i], composed.outputs[i], tol, tol));
        }
        for (size_t i = 0; i < fused.grads.size(); ++i)
          CHECK(allclose(fused.grads[i], composed.grads[i], tol, tol));
      }
    }
  }
}

TEST_CASE("fused cells: 16-bit gates with f32 states compute in f32, and the refusals") {
  const Tensor ig = kiln::testing::random_f64({2, 8}, 1).to(DType::bf16);
  const Tensor hg = kiln::testing::random_f64({2, 8}, 2).to(DType::bf16);
  const Tensor c = kiln::testing::random_f64({2, 2}, 3).to(DType::f32);
  const LstmCellState fused = fused_lstm_cell(ig, hg, c);
  const LstmCellState composed = composed_lstm_cell(ig, hg, c);
  CHECK(fused.h.dtype() == DType::f32);
  CHECK(fused.c.dtype() == DType::f32);
  // The composition rounds the activated gates to bf16; the fused cell keeps them in f32.
  CHECK(allclose(fused.h, composed.h, 1e-2, 1e-2));
  CHECK_THROWS_WITH(fused_lstm_cell(ig, hg, zeros({2, 3})),
                    Contains("fused_lstm_cell: expected input_gates and hidden_gates of shape "
                             "[2, 12]"));
  CHECK_THROWS_WITH(fused_gru_cell(zeros({2, 6}), zeros({2, 6}), zeros({2})),
                    Contains("fused_gru_cell: expected hx of shape [N, H]"));
  CHECK_THROWS_WITH(fused_gru_cell(zeros({2, 6}), zeros({2, 6}), zeros({2, 2}, DType::i64)),
                    Contains("fused_gru_cell"));
}
