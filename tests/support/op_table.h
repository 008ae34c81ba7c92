// The parity harness, in the spirit of ggml's test-backend-ops: every op of kiln in one table, each
// entry with the inputs that keep it well-conditioned and a function that runs it. The runner runs
// an entry on a device in each floating dtype it lists, forward and (where it is differentiable)
// backward from a fixed upstream gradient, and compares with the same op on the CPU in f64 on the
// same (rounded) inputs, within the one tolerance table of parity.h.
//
// tests/test_parity.cpp runs the table on the CPU; tests/cuda/test_parity.cpp on cuda:0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"

namespace kiln::testing {

// The groups the test files run as one Catch test case each.
enum class OpFamily {
  unary,          // elementwise functions of one tensor, scalar arithmetic, dropout
  binary,         // elementwise arithmetic of two tensors, broadcasting
  selection,      // comparisons, logical ops, isnan, where, masked_fill
  reduction,      // sum, mean, var, std_dev, norm, max/min, amax/amin, argmax/argmin, cumsum
  softmax,        // softmax and log_softmax
  loss,           // nll_loss, cross_entropy, mse_loss
  linalg,         // matmul, mm, bmm, linear
  convolution,    // conv2d and its two gradient ops
  pooling,        // max, average and adaptive average pooling and their backward ops
  normalization,  // batch_norm, batch_norm_relu, batch_norm_add_relu, layer_norm
  indexing,       // index_select, gather, scatter_add, index_add, embedding, one_hot
  joining,        // cat, stack, split, chunk
  recurrent,      // the fused LSTM and GRU cells
  view,           // views, clone, contiguous, in-place ops
};

// One input as made, on the CPU: floating values in f64 (rounded to the dtype under test on both
// sides), or integer and bool tensors (indices, targets, masks) passed as they are. Differentiable
// floating inputs become leaves whose gradients are compared.
struct OpInput {
  Tensor value;
  bool differentiable = true;
};

// A tolerance looser than the table's for one op in one dtype, as a multiple of it, and the
// reason. gpu_only: the reason is a GPU library's (cuDNN, cuBLAS), not the op's arithmetic.
struct Allowance {
  DType dtype;
  double forward = 1.0;   // times tolerance(dtype)
  double gradient = 1.0;  // times gradient_tolerance(dtype)
  const char* why = "";
  bool gpu_only = false;
};

struct OpEntry {
  using InputsFn = std::function<std::vector<OpInput>(uint64_t seed)>;
  using RunFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

  OpEntry(std::string name, OpFamily family, InputsFn inputs, RunFn run, bool differentiable = true,
          std::vector<DType> dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16})
      : name(std::move(name)),
        family(family),
        inputs(std::move(inputs)),
        run(std::move(run)),
        differentiable(differentiable),
        dtypes(std::move(dtypes)) {}

  std::string name;
  OpFamily family;
  // The inputs, made afresh for every run from `seed` (so in-place ops never see a used input).
  InputsFn inputs;
  // The op. The outputs that require grad are where the backward starts, each from its own fixed
  // upstream gradient; the others (indices, updated running statistics) are only compared.
  RunFn run;
  bool differentiable;
  std::vector<DType> dtypes;
  std::vector<Allowance> allowances;
};

const std::vector<OpEntry>& op_table();

// Runs every entry of `family` on `device`, one Catch section per op and dtype, named
// "<op> on <device> in <dtype>".
void check_op_family(OpFamily family, Device device);

// What one run of `op` on `device` in `dtype` gives, moved to the CPU: its outputs, then the
// gradient of each differentiable input (undefined where none reached it), from the same inputs
// and upstream gradients check_op_family uses for `seed`.
std::vector<Tensor> op_results(const OpEntry& op, Device device, DType dtype, uint64_t seed);

// The seed check_op_family gives the table's entry at `index`.
uint64_t op_seed(size_t index);

}  // namespace kiln::testing
