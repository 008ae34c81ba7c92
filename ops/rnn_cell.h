// One step of an LSTM or GRU from its gate pre-activations, as PyTorch's _thnn_fused_lstm_cell
// and _thnn_fused_gru_cell: input_gates = x W_ih^T + b_ih (for a sequence, one linear over every
// step), hidden_gates = h W_hh^T + b_hh, in PyTorch's gate order (LSTM: i, f, g, o; GRU: r, z, n).
// The fused forms run the cell's arithmetic as one kernel forward and one backward
// (kernels/rnn_cell.h); the composed forms are the same cell from sigmoid, tanh and elementwise
// ops, the reference, and what the fused backward differentiates under create_graph (double
// backward). Both take inputs of any floating dtypes and compute in their promoted dtype (as the
// composition's elementwise ops promote: 16-bit gates with f32 states give f32 states).
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

struct LstmCellState {
  Tensor h, c;
};

// input_gates, hidden_gates [N, 4H]; cx [N, H]: c' = f * cx + i * g, h' = o * tanh(c').
LstmCellState fused_lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                              const Tensor& cx);
LstmCellState composed_lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                 const Tensor& cx);

// input_gates, hidden_gates [N, 3H]; hx [N, H]: n = tanh(in + r * hn), h' = (1 - z) * n + z * hx
// (the reset gate scales the hidden part of n, b_hh included, as PyTorch's GRU).
Tensor fused_gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx);
Tensor composed_gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx);

}  // namespace kiln
