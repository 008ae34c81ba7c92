// Padding, as torch.nn.functional.pad: constant, reflect, replicate and circular, composed of
// narrow, flip, expand and cat, so it runs on every device and dtype those take, and its gradient
// is theirs (deterministic: no atomics).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

enum class PadMode { constant, reflect, replicate, circular };

// pads: pairs (before, after) from the last dim backwards, as PyTorch's: {left, right} pads the
// last dim, {left, right, top, bottom} the last two. A negative amount crops (constant mode).
// reflect mirrors without repeating the edge (amounts below the dim's size), replicate repeats the
// edge, circular wraps (amounts up to the dim's size).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode = PadMode::constant,
           double value = 0.0);
// "constant", "reflect", "replicate" or "circular"; anything else is a ValueError naming pad.
PadMode pad_mode(const std::string& name);

}  // namespace kiln
