// Drawing indices from categorical distributions, as torch.multinomial.
//
//   Tensor next = multinomial(softmax(logits, -1), 1);  // [N, V] -> i64 [N, 1]
#pragma once

#include <cstdint>

#include "kiln/core/generator.h"
#include "kiln/core/tensor.h"

namespace kiln {

// probs: [C] or [N, C] of non-negative finite weights (not necessarily summing to 1), floating.
// Returns i64 [num_samples] or [N, num_samples] of category indices, on probs' device. Without
// replacement a category is drawn at most once per row, so num_samples may not exceed the row's
// count of non-zero weights. The draws come from the generator's uniform stream (the default one
// when null), computed on the host: equal on every device for one seed.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator* generator = nullptr);

}  // namespace kiln
