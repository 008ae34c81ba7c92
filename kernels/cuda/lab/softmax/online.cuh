// The online softmax's running state (Milakov and Gimelshein, 2018), shared by v2-v4: a row's
// max and its sum of exp(x - max) gathered in one pass. When a larger element arrives, the sum so
// far is rescaled to the new max; two partial states combine the same way. Finite inputs only.
#pragma once

#include <cmath>

namespace kiln::lab::softmax {

struct MaxSum {
  float max;
  float sum;  // of exp(x - max) over the elements seen
};

__device__ __forceinline__ MaxSum empty_max_sum() {
  return {-INFINITY, 0.0f};
}

// One more element: one exp, whichever branch.
__device__ __forceinline__ void online_update(MaxSum& state, float v) {
  if (v > state.max) {
    state.sum = state.sum * expf(state.max - v) + 1.0f;  // expf(-inf) = 0 for the first element
    state.max = v;
  } else {
    state.sum += expf(v - state.max);
  }
}

// Two partial states (from two threads) as one; an empty state (max -inf) adds nothing.
struct CombineMaxSum {
  __device__ __forceinline__ MaxSum operator()(MaxSum a, MaxSum b) const {
    const float max = fmaxf(a.max, b.max);
    if (max == -INFINITY) return empty_max_sum();
    return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
  }
};

}  // namespace kiln::lab::softmax
