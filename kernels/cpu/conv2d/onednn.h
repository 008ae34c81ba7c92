// Convolutions through oneDNN (Debian's libdnnl-dev, the library under PyTorch's CPU
// convolutions): one of the candidates choice.cpp picks from. A build without oneDNN has none.
#pragma once

#include <cstdint>

#include "kiln/kernels/cpu/conv2d/call.h"

namespace kiln::cpu {

// Whether oneDNN can run the call here: oneDNN is on (backends::onednn_enabled), takes the dtype
// at kiln's ISA level (f32 from AVX2, bf16 from AVX512-BF16), was capped to that level, and has a
// JIT kernel for the problem (its plan is made here, once per thread and problem).
bool onednn_conv2d_runs(const ConvCall& call);

// Runs the call through oneDNN; only after onednn_conv2d_runs said it can. A gradient pass reads
// the blocked copy of grad_output the thread's last gradient pass made, where it is of the same
// unchanged tensor in the same layout (the weight gradient after the input gradient).
void onednn_conv2d(const ConvCall& call);

// A forward with ConvCall::keep_input keeps its blocked copy of x (a new buffer) for the weight
// gradient of the same unchanged x, which reads it instead of reordering x and drops it; copies
// whose x was freed are dropped by the next call that looks. How many are kept now, dropping those:
int64_t onednn_kept_conv_inputs();

// Drops the copy of grad_output (not those of forward inputs), so that the next call reorders its
// operands as a first one does (the autotuner times each candidate so).
void forget_onednn_conv2d_copies();

}  // namespace kiln::cpu
