// LSTM and GRU as PyTorch's: several layers, bidirectional, batch_first, dropout between layers,
// PyTorch's parameter names (weight_ih_l0, bias_hh_l1_reverse, ...) and gate order (LSTM: input,
// forget, cell, output; GRU: reset, update, new), so state dicts load both ways. Each step is
// kiln's linear (the input projections of a whole sequence in one linear, then h W_hh^T + b_hh per
// step) and a cell: the fused cell of ops/rnn_cell.h (one kernel forward, one backward) or the
// same cell composed of sigmoid, tanh and elementwise ops; autograd differentiates either through
// time, and every device and dtype runs both. Under autocast the linears run in 16 bits and the
// cell's arithmetic on the states in their dtype (f32 by default), so the results are f32 where
// PyTorch's fused CUDA cells return 16-bit ones.
//
// Which cell runs, decided by measurement on what the CPU can check (issue 40; docs/results.md,
// "Recurrent cells"; benchmarks/recurrent_cell):
// - On the CPU, the fused cell (backends::fused_rnn_cell_enabled(), default on): never slower in
//   the shapes measured, one thread, CPU time, medians: an LSTM over T 64, N 32, hidden 256 0.99
//   of the composed time forward + backward (the cell alone 0.87; the sequence's time goes to the
//   matmuls and to accumulating each step's gradient into the projections of the whole sequence),
//   a GRU 0.88 (0.62); at T 32, N 8, hidden 64, where each op's own cost counts, 0.66 and 0.53.
// - On a GPU, the composed cell unless backends::fused_rnn_cell_on_gpu() (KILN_FUSED_RNN_CELL=1).
//   Launches are what the CPU can check of the GPU side: on the simulator one more LSTM step
//   launches 16 kernels and library calls forward + backward fused against 59 composed (forward 4
//   against 13), a GRU step 14 against 62. But the fused CUDA kernels have run only in the
//   simulator, and code that never ran on a GPU is not a default on one, so a GPU LSTM or GRU
//   composes and says so once on stderr.
// - Not cuDNN's RNN API (cudnnRNNForward and its backward passes over the whole sequence), though
//   on a GPU it would launch least: kiln's simulator replaces cuDNN with CPU stand-ins, so the
//   API's weight packing, reserve space and calls could be checked only against a stand-in written
//   from the same reading of its documentation, and it could not be a default before running on a
//   GPU anyway. The fused cell is checked as written (its kernel runs in the simulator, in the
//   parity table, in every dtype), keeps double backward (the cell recomposes under create_graph,
//   where PyTorch's cuDNN RNN refuses a second backward), and serves the CPU too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;  // input and output [N, T, features] instead of [T, N, features]
  double dropout = 0.0;      // on each layer's output but the last's, in training
  bool bidirectional = false;
};

// output: [T, N, directions * hidden] (batch_first: [N, T, ...]); h_n and c_n: [layers *
// directions, N, hidden], layer by layer, forward before reverse. Unbatched inputs [T, features]
// give unbatched results, as PyTorch's.
struct RNNResult {
  Tensor output, h_n, c_n;  // c_n: LSTM only
};

// The machinery shared by LSTM and GRU: the parameters, the layers and directions, the shapes.
class RecurrentBase : public Module {
 public:
  std::string extra_repr() const override;
  const RNNOptions& options() const { return options_; }

 protected:
  // gates: 4 (LSTM) or 3 (GRU).
  RecurrentBase(std::string kind, int64_t input_size, int64_t hidden_size, int64_t gates,
                RNNOptions options);
  // Runs every layer and direction; c0 is used (and c_n made) only when `lstm`.
  RNNResult run(const Tensor& x, const Tensor& h0, const Tensor& c0, bool lstm);

 private:
  struct Weights {
    Tensor w_ih, w_hh, b_ih, b_hh;
  };
  std::string kind_;
  int64_t input_size_, hidden_size_;
  RNNOptions options_;
  std::vector<Weights> weights_;  // layer-major, forward then reverse
};

class LSTM : public RecurrentBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {})
      : RecurrentBase("LSTM", input_size, hidden_size, 4, options) {}
  // The output sequence alone, from zero initial states.
  Tensor forward(const Tensor& x) override { return run(x, Tensor(), Tensor(), true).output; }
  // h0 and c0 [layers * directions, N, hidden] (either undefined: zeros).
  RNNResult forward(const Tensor& x, const Tensor& h0, const Tensor& c0) {
    return run(x, h0, c0, true);
  }
  std::string name() const override { return "LSTM"; }
};

class GRU : public RecurrentBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {})
      : RecurrentBase("GRU", input_size, hidden_size, 3, options) {}
  Tensor forward(const Tensor& x) override { return run(x, Tensor(), Tensor(), false).output; }
  RNNResult forward(const Tensor& x, const Tensor& h0) { return run(x, h0, Tensor(), false); }
  std::string name() const override { return "GRU"; }
};

}  // namespace kiln::nn
