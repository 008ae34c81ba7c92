// The fused recurrent cells: one step of an LSTM or a GRU from its gate pre-activations in one
// pass, forward and backward, as PyTorch's _thnn_fused_lstm_cell and _thnn_fused_gru_cell
// (kernels/cpu/rnn_cell.cpp, kernels/cuda/rnn_cell.cu). Every tensor is contiguous and of one
// floating dtype; the arithmetic runs in acc_type_t (float for f16 and bf16), each result rounded
// once. The forward also writes a workspace of the activated gates, as PyTorch's, so that the
// backward runs without a transcendental function; the workspace is in the op's dtype (rounded as
// the composition rounds the activations it saves). An undefined workspace is not written (a
// forward with no backward to come).
//
// LSTM, gates [N, 4H] in PyTorch's order i, f, g, o, each a = input_gates + hidden_gates:
//   i = sigmoid(a_i), f = sigmoid(a_f), g = tanh(a_g), o = sigmoid(a_o)
//   cy = f * cx + i * g,  hy = o * tanh(cy)
// GRU, gates [N, 3H] in PyTorch's order r, z, n (ig: input_gates, hg: hidden_gates, b_hh in hg):
//   r = sigmoid(ig_r + hg_r), z = sigmoid(ig_z + hg_z), n = tanh(ig_n + r * hg_n)
//   hy = (1 - z) * n + z * hx
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

struct RnnCellKernels {
  // input_gates, hidden_gates [N, 4H]; cx, hy, cy [N, H]; workspace [N, 5H]: i, f, g, o, tanh(cy).
  void (*lstm_forward)(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
                       const Tensor& hy, const Tensor& cy, const Tensor& workspace);
  // grad_hy, grad_cy [N, H] -> grad_gates [N, 4H] (the gradient of both gate inputs), grad_cx.
  void (*lstm_backward)(const Tensor& workspace, const Tensor& cx, const Tensor& grad_hy,
                        const Tensor& grad_cy, const Tensor& grad_gates, const Tensor& grad_cx);
  // input_gates, hidden_gates [N, 3H]; hx, hy [N, H]; workspace [N, 3H]: r, z, n.
  void (*gru_forward)(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                      const Tensor& hy, const Tensor& workspace);
  // grad_hy [N, H] -> grad_input_gates, grad_hidden_gates [N, 3H] (they differ in n's third),
  // grad_hx [N, H]; hidden_gates for hn, the hidden part of n.
  void (*gru_backward)(const Tensor& workspace, const Tensor& hidden_gates, const Tensor& hx,
                       const Tensor& grad_hy, const Tensor& grad_input_gates,
                       const Tensor& grad_hidden_gates, const Tensor& grad_hx);

  static const RnnCellKernels cpu;
  static const RnnCellKernels* const cuda;  // null in a build without CUDA
};

}  // namespace kiln
