// The fused LSTM and GRU cells (ops/rnn_cell.h): checks, the promoted dtype, one kernel forward,
// one kernel backward. The LSTM cell has two outputs and a node has one (core/autograd/node.h), so
// its kernel writes h' and c' into one [2, N, H] tensor, the node's output, and the op returns the
// two halves as selects of it: their gradients meet there (summed by the engine) and the backward
// kernel reads both. As PyTorch's, the nodes keep the forward's workspace of activated gates (the
// backward kernels then compute no transcendental function) and the inputs: under create_graph
// they differentiate the composed cell instead, so the cells keep double backward. Without a node
// to come (no grad mode, or no input needing a gradient) the forward writes no workspace.
#include "kiln/ops/rnn_cell.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/kernels/rnn_cell.h"
#include "kiln/ops/autograd/grad.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/index.h"

namespace kiln {

namespace {

constexpr const char* kLstm = "fused_lstm_cell";
constexpr const char* kGru = "fused_gru_cell";

// Checks a cell's operands (gates [N, gates * H], state [N, H]) and returns their promoted dtype.
DType check_cell(const char* op, const Tensor& input_gates, const Tensor& hidden_gates,
                 const Tensor& state, int64_t gates, const char* state_name) {
  require_defined(op, input_gates, "input_gates");
  require_defined(op, hidden_gates, "hidden_gates");
  require_defined(op, state, state_name);
  common_device(op, {&input_gates, &hidden_gates, &state});
  require_floating(op, input_gates, "input_gates");
  require_floating(op, hidden_gates, "hidden_gates");
  require_floating(op, state, state_name);
  KILN_CHECK(state.dim() == 2, ShapeError, "{}: expected {} of shape [N, H], got {}", op,
             state_name, describe(state));
  const Shape gate_shape{state.size(0), gates * state.size(1)};
  KILN_CHECK(input_gates.shape() == gate_shape && hidden_gates.shape() == gate_shape, ShapeError,
             "{}: expected input_gates and hidden_gates of shape {} ({} gates of {}'s {}), got {} "
             "and {}",
             op, shape_str(gate_shape), gates, state_name, state.size(1), describe(input_gates),
             describe(hidden_gates));
  return promote_types(promote_types(input_gates.dtype(), hidden_gates.dtype()), state.dtype());
}

// What a kernel reads: detached, in the compute dtype, contiguous (a no-op for the usual operands:
// a step of the sequence's projections, a linear's result, a state).
Tensor operand(const Tensor& t, DType dtype) {
  return t.detach().to(dtype).contiguous();
}

// Under create_graph: the gradients of the composed cell's outputs with respect to the inputs that
// need one, recorded, so they can be differentiated again.
std::vector<Tensor> recomposed(const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& outputs,
                               const std::vector<Tensor>& grads) {
  std::vector<Tensor> wanted;
  for (const Tensor& t : inputs)
    if (t.requires_grad()) wanted.push_back(t);
  const std::vector<Tensor> got =
      autograd::grad(outputs, wanted, grads, {.create_graph = true, .allow_unused = true});
  std::vector<Tensor> result;
  size_t next = 0;
  for (const Tensor& t : inputs) result.push_back(t.requires_grad() ? got[next++] : Tensor());
  return result;
}

struct FusedLstmCellBackward : Node {
  SavedTensor input_gates, hidden_gates, cx, workspace;
  DType dtype = DType::f32;
  std::string name() const override { return "FusedLstmCellBackward"; }
  bool differentiable_backward() const override { return true; }
  // g: [2, N, H], the gradients of h' and c'.
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor ig = input_gates.unpack(*this), hg = hidden_gates.unpack(*this);
    const Tensor c = cx.unpack(*this);
    if (GradMode::is_enabled()) {
      const LstmCellState s = composed_lstm_cell(ig, hg, c);
      return recomposed({ig, hg, c}, {s.h, s.c}, {g.select(0, 0), g.select(0, 1)});
    }
    const Tensor grads = operand(g, dtype);
    const Tensor grad_gates = empty(ig.shape(), dtype, ig.device());
    const Tensor grad_cx = empty(c.shape(), dtype, c.device());
    kernels_for<RnnCellKernels>(kLstm, ig.device())
        .lstm_backward(workspace.unpack(*this), operand(c, dtype), grads.select(0, 0),
                       grads.select(0, 1), grad_gates, grad_cx);
    return {next_edges[0].valid() ? grad_gates.to(ig.dtype()) : Tensor(),
            next_edges[1].valid() ? grad_gates.to(hg.dtype()) : Tensor(),
            next_edges[2].valid() ? grad_cx.to(c.dtype()) : Tensor()};
  }
  void release_saved() override {
    input_gates.reset(), hidden_gates.reset(), cx.reset(), workspace.reset();
  }
};

struct FusedGruCellBackward : Node {
  SavedTensor input_gates, hidden_gates, hx, workspace;
  DType dtype = DType::f32;
  std::string name() const override { return "FusedGruCellBackward"; }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor ig = input_gates.unpack(*this), hg = hidden_gates.unpack(*this);
    const Tensor h = hx.unpack(*this);
    if (GradMode::is_enabled()) return recomposed({ig, hg, h}, {composed_gru_cell(ig, hg, h)}, {g});
    const Tensor grad_ig = empty(ig.shape(), dtype, ig.device());
    const Tensor grad_hg = empty(hg.shape(), dtype, hg.device());
    const Tensor grad_hx = empty(h.shape(), dtype, h.device());
    kernels_for<RnnCellKernels>(kGru, ig.device())
        .gru_backward(workspace.unpack(*this), operand(hg, dtype), operand(h, dtype),
                      operand(g, dtype), grad_ig, grad_hg, grad_hx);
    return {next_edges[0].valid() ? grad_ig.to(ig.dtype()) : Tensor(),
            next_edges[1].valid() ? grad_hg.to(hg.dtype()) : Tensor(),
            next_edges[2].valid() ? grad_hx.to(h.dtype()) : Tensor()};
  }
  void release_saved() override {
    input_gates.reset(), hidden_gates.reset(), hx.reset(), workspace.reset();
  }
};

}  // namespace

LstmCellState fused_lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                              const Tensor& cx) {
  profiler::OpScope profile(kLstm, {&input_gates, &hidden_gates, &cx});
  const DType dtype = check_cell(kLstm, input_gates, hidden_gates, cx, 4, "cx");
  Tensor hc = empty({2, cx.size(0), cx.size(1)}, dtype, cx.device());
  const bool recording = should_record({&input_gates, &hidden_gates, &cx});
  const Tensor workspace =
      recording ? empty({cx.size(0), 5 * cx.size(1)}, dtype, cx.device()) : Tensor();
  if (cx.numel() > 0)
    kernels_for<RnnCellKernels>(kLstm, cx.device())
        .lstm_forward(operand(input_gates, dtype), operand(hidden_gates, dtype), operand(cx, dtype),
                      hc.select(0, 0), hc.select(0, 1), workspace);
  if (recording) {
    auto node = std::make_shared<FusedLstmCellBackward>();
    node->input_gates = SavedTensor(input_gates);
    node->hidden_gates = SavedTensor(hidden_gates);
    node->cx = SavedTensor(cx);
    node->workspace = SavedTensor(workspace);
    node->dtype = dtype;
    record(hc, node, {&input_gates, &hidden_gates, &cx});
  }
  return {hc.select(0, 0), hc.select(0, 1)};
}

Tensor fused_gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx) {
  profiler::OpScope profile(kGru, {&input_gates, &hidden_gates, &hx});
  const DType dtype = check_cell(kGru, input_gates, hidden_gates, hx, 3, "hx");
  Tensor hy = empty(hx.shape(), dtype, hx.device());
  const bool recording = should_record({&input_gates, &hidden_gates, &hx});
  const Tensor workspace =
      recording ? empty({hx.size(0), 3 * hx.size(1)}, dtype, hx.device()) : Tensor();
  if (hx.numel() > 0)
    kernels_for<RnnCellKernels>(kGru, hx.device())
        .gru_forward(operand(input_gates, dtype), operand(hidden_gates, dtype), operand(hx, dtype),
                     hy, workspace);
  if (recording) {
    auto node = std::make_shared<FusedGruCellBackward>();
    node->input_gates = SavedTensor(input_gates);
    node->hidden_gates = SavedTensor(hidden_gates);
    node->hx = SavedTensor(hx);
    node->workspace = SavedTensor(workspace);
    node->dtype = dtype;
    record(hy, node, {&input_gates, &hidden_gates, &hx});
  }
  return hy;
}

LstmCellState composed_lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                 const Tensor& cx) {
  check_cell("composed_lstm_cell", input_gates, hidden_gates, cx, 4, "cx");
  const std::vector<Tensor> g = chunk(add(input_gates, hidden_gates), 4, 1);
  const Tensor c = add(mul(sigmoid(g[1]), cx), mul(sigmoid(g[0]), tanh(g[2])));
  return {mul(sigmoid(g[3]), tanh(c)), c};
}

Tensor composed_gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx) {
  check_cell("composed_gru_cell", input_gates, hidden_gates, hx, 3, "hx");
  const std::vector<Tensor> gi = chunk(input_gates, 3, 1), gh = chunk(hidden_gates, 3, 1);
  const Tensor r = sigmoid(add(gi[0], gh[0]));
  const Tensor z = sigmoid(add(gi[1], gh[1]));
  const Tensor n = tanh(add(gi[2], mul(r, gh[2])));
  return add(mul(rsub(1.0, z), n), mul(z, hx));
}

}  // namespace kiln
