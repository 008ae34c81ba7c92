// The online softmax's running state (Milakov and Gimelshein, 2018), shared by v2-v4: a row's
// max and its sum of exp(x - max) gathered in one pass. When a larger element arrives, the sum so
// far is rescaled to the new max; two partial states combine the same way. An element of -inf (a
// masked one) adds exactly nothing, wherever it sits in the row, first included; a row of nothing
// but -inf keeps max -inf and sum 0, and its outputs are 0 / 0 = NaN, as PyTorch's are. Plain
// C++ for the host too, so tests/test_lab_tiling.cpp runs it on the CPU.
#pragma once

#include <cmath>

#include "kiln/kernels/cuda/lab/lab.h"

namespace kiln::lab::softmax {

struct MaxSum {
  float max;
  float sum;  // of exp(x - max) over the elements seen
};

KILN_HOST_DEVICE inline MaxSum empty_max_sum() {
  return {-INFINITY, 0.0f};
}

// One more element: at most one exp. The -inf test is not redundant: while the max is still -inf
// (every element so far masked), expf(v - max) would be expf(-inf - -inf) = expf(NaN).
KILN_HOST_DEVICE inline void online_update(MaxSum& state, float v) {
  if (v > state.max) {
    state.sum = state.sum * expf(state.max - v) + 1.0f;  // expf(-inf) = 0 for the first element
    state.max = v;
  } else if (v != -INFINITY) {
    state.sum += expf(v - state.max);
  }
}

// Two partial states (from two threads) as one; an empty state (max -inf) adds nothing.
struct CombineMaxSum {
  KILN_HOST_DEVICE MaxSum operator()(MaxSum a, MaxSum b) const {
    const float max = fmaxf(a.max, b.max);
    if (max == -INFINITY) return empty_max_sum();
    return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
  }
};

}  // namespace kiln::lab::softmax
