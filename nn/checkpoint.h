// checkpoint_sequential, as torch.utils.checkpoint.checkpoint_sequential: activation checkpointing
// (ops/autograd/checkpoint.h) applied to a Sequential in segments.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"
#include "kiln/nn/container.h"
#include "kiln/ops/autograd/checkpoint.h"

namespace kiln::nn {

// Runs seq on input in `segments` runs of seq.size() / segments modules (the last run takes the
// rest): every run but the last goes through checkpoint(), so only its input is kept for backward
// and its activations are recomputed there; the last run keeps its activations, as backward needs
// them first. segments goes from 1 (no checkpoint) to seq.size().
Tensor checkpoint_sequential(const Sequential& seq, int64_t segments, const Tensor& input);

}  // namespace kiln::nn
