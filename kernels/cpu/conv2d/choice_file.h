// The autotuner's choices in a file (choice.cpp; KILN_CPU_CONV_CACHE names it), so that a second
// run on the same machine skips the timing: one line per problem, "conv2d", the problem's key (its
// numbers: pass, dtype, bias, ISA level, oneDNN on, sizes) and the implementation kept.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kernels/cpu/conv2d/choice.h"

namespace kiln::cpu {

using Conv2dChoiceKey = std::vector<int64_t>;

// The choices in the file at `path`, in its order; no file reads as none. A line that is not one
// of the above is a ValueError naming the file and the line.
std::vector<std::pair<Conv2dChoiceKey, Conv2dImpl>> read_conv2d_choice_file(
    const std::string& path);

// Adds a line for the choice to the file at `path` (made if absent); a ValueError naming the file
// when it cannot.
void append_conv2d_choice(const std::string& path, const Conv2dChoiceKey& key, Conv2dImpl impl);

}  // namespace kiln::cpu
