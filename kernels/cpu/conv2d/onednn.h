// Convolutions through oneDNN (Debian's libdnnl-dev, the library under PyTorch's CPU
// convolutions): one of the candidates choice.cpp picks from. A build without oneDNN has none.
#pragma once

#include "kiln/kernels/cpu/conv2d/call.h"

namespace kiln::cpu {

// Whether oneDNN can run the call here: oneDNN is on (backends::onednn_enabled), takes the dtype
// at kiln's ISA level (f32 from AVX2, bf16 from AVX512-BF16), was capped to that level, and has a
// JIT kernel for the problem (its plan is made here, once per thread and problem).
bool onednn_conv2d_runs(const ConvCall& call);

// Runs the call through oneDNN; only after onednn_conv2d_runs said it can.
void onednn_conv2d(const ConvCall& call);

}  // namespace kiln::cpu
