#include "kiln/nn/recurrent.h"

#include <fmt/format.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/backends.h"
#include "kiln/core/device.h"
#include "kiln/core/error.h"
#include "kiln/core/shape.h"
#include "kiln/nn/init.h"
#include "kiln/ops/dropout.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/rnn_cell.h"

namespace kiln::nn {

namespace {

// Whether this sequence's cells run fused (ops/rnn_cell.h) or composed: backends' two switches,
// and on a GPU, where the fused kernels have not run, a note once that the cells compose.
bool fused_cells(Device device, const std::string& kind) {
  if (!backends::fused_rnn_cell_enabled()) return false;
  if (!device.is_cuda() || backends::fused_rnn_cell_on_gpu()) return true;
  static std::once_flag told;
  std::call_once(told, [&] {
    std::fprintf(stderr,
                 "kiln: %s on %s composes its cells op by op: the fused cell kernels have not run "
                 "on a GPU yet (docs/results.md, \"Where each GPU path ran\"); "
                 "KILN_FUSED_RNN_CELL=1 or backends::set_fused_rnn_cell_on_gpu(true) uses them\n",
                 kind.c_str(), device.str().c_str());
  });
  return false;
}

// One direction of one layer over the whole sequence. x_proj: the input projections [T, N, gates *
// hidden] with b_ih in them; returns the hidden states [T, N, hidden] in time order and leaves the
// last state in h (and c).
Tensor run_direction(const Tensor& x_proj, const Tensor& w_hh, const Tensor& b_hh, bool reverse,
                     bool lstm, bool fused, Tensor& h, Tensor& c) {
  const int64_t steps = x_proj.size(0);
  std::vector<Tensor> outputs(static_cast<size_t>(steps));
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? steps - 1 - k : k;
    const Tensor recurrent = linear(h, w_hh, b_hh);
    const Tensor step_input = x_proj.select(0, t);
    if (lstm) {
      const LstmCellState s = fused ? fused_lstm_cell(step_input, recurrent, c)
                                    : composed_lstm_cell(step_input, recurrent, c);
      h = s.h;
      c = s.c;
    } else {
      h = fused ? fused_gru_cell(step_input, recurrent, h)
                : composed_gru_cell(step_input, recurrent, h);
    }
    outputs[static_cast<size_t>(t)] = h;
  }
  return stack(outputs, 0);
}

}  // namespace

RecurrentBase::RecurrentBase(std::string kind, int64_t input_size, int64_t hidden_size,
                             int64_t gates, RNNOptions options)
    : kind_(std::move(kind)),
      input_size_(input_size),
      hidden_size_(hidden_size),
      options_(options) {
  KILN_CHECK(input_size > 0 && hidden_size > 0 && options.num_layers > 0, ValueError,
             "{}: input_size, hidden_size and num_layers must be positive, got {}, {} and {}",
             kind_, input_size, hidden_size, options.num_layers);
  KILN_CHECK(options.dropout >= 0.0 && options.dropout <= 1.0, ValueError,
             "{}: dropout must be in [0, 1], got {}", kind_, options.dropout);
  const int64_t directions = options.bidirectional ? 2 : 1;
  // PyTorch's reset_parameters: every weight and bias uniform in +-1/sqrt(hidden_size).
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    for (int64_t d = 0; d < directions; ++d) {
      const std::string suffix = fmt::format("_l{}{}", layer, d == 1 ? "_reverse" : "");
      const int64_t in = layer == 0 ? input_size : hidden_size * directions;
      Weights w;
      w.w_ih = register_parameter("weight_ih" + suffix, empty({gates * hidden_size, in}));
      w.w_hh = register_parameter("weight_hh" + suffix, empty({gates * hidden_size, hidden_size}));
      if (options.bias) {
        w.b_ih = register_parameter("bias_ih" + suffix, empty({gates * hidden_size}));
        w.b_hh = register_parameter("bias_hh" + suffix, empty({gates * hidden_size}));
      }
      for (Tensor* t : {&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh})
        if (t->defined()) init::uniform_(*t, -bound, bound);
      weights_.push_back(w);
    }
  }
}

RNNResult RecurrentBase::run(const Tensor& x, const Tensor& h0, const Tensor& c0, bool lstm) {
  KILN_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 2) && x.size(-1) == input_size_, ShapeError,
             "{}: expected an input [T, N, {}] ([N, T, {}] with batch_first) or [T, {}] "
             "unbatched, got {}",
             kind_, input_size_, input_size_, input_size_, describe(x));
  const bool batched = x.dim() == 3;
  Tensor seq = batched ? x : x.unsqueeze(1);
  if (batched && options_.batch_first) seq = seq.transpose(0, 1);
  const int64_t batch = seq.size(1);
  const int64_t directions = options_.bidirectional ? 2 : 1;
  const int64_t states = options_.num_layers * directions;
  auto initial = [&](const Tensor& given, const char* what) {
    if (!given.defined()) return zeros({states, batch, hidden_size_}, x.dtype(), x.device());
    const Tensor s = batched ? given : given.unsqueeze(1);
    KILN_CHECK(
        s.shape() == (Shape{states, batch, hidden_size_}), ShapeError,
        "{}: expected {} of shape {}, got {}", kind_, what,
        shape_str(batched ? Shape{states, batch, hidden_size_} : Shape{states, hidden_size_}),
        describe(given));
    return s;
  };
  const Tensor h_init = initial(h0, "h0");
  const Tensor c_init = lstm ? initial(c0, "c0") : Tensor();
  std::vector<Tensor> h_last, c_last;
  const bool fused = fused_cells(x.device(), kind_);
  Tensor layer_input = seq;
  for (int64_t layer = 0; layer < options_.num_layers; ++layer) {
    std::vector<Tensor> direction_outputs;
    for (int64_t d = 0; d < directions; ++d) {
      const int64_t index = layer * directions + d;
      const Weights& w = weights_[static_cast<size_t>(index)];
      Tensor h = h_init.select(0, index), c = lstm ? c_init.select(0, index) : Tensor();
      const Tensor x_proj = linear(layer_input, w.w_ih, w.b_ih);
      direction_outputs.push_back(run_direction(x_proj, w.w_hh, w.b_hh, d == 1, lstm, fused, h, c));
      h_last.push_back(h);
      if (lstm) c_last.push_back(c);
    }
    layer_input = directions == 1 ? direction_outputs[0] : cat(direction_outputs, 2);
    if (layer + 1 < options_.num_layers && options_.dropout > 0.0)
      layer_input = dropout(layer_input, options_.dropout, is_training());
  }
  RNNResult result{layer_input, stack(h_last, 0), lstm ? stack(c_last, 0) : Tensor()};
  if (batched && options_.batch_first) result.output = result.output.transpose(0, 1);
  if (!batched) {
    result.output = result.output.squeeze(1);
    result.h_n = result.h_n.squeeze(1);
    if (lstm) result.c_n = result.c_n.squeeze(1);
  }
  return result;
}

std::string RecurrentBase::extra_repr() const {
  std::string s = fmt::format("{}, {}", input_size_, hidden_size_);
  if (options_.num_layers != 1) s += fmt::format(", num_layers={}", options_.num_layers);
  if (!options_.bias) s += ", bias=False";
  if (options_.batch_first) s += ", batch_first=True";
  if (options_.dropout != 0.0) s += fmt::format(", dropout={}", options_.dropout);
  if (options_.bidirectional) s += ", bidirectional=True";
  return s;
}

}  // namespace kiln::nn
