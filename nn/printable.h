// Text from a file, made safe to quote in an error message.
#pragma once

#include <string>

namespace kiln::nn {

// `text` with each byte that is not part of a UTF-8 sequence, and each control character, as
// \xNN: a damaged file's bytes, quoted in an error, must not reach a terminal raw.
std::string printable(const std::string& text);

}  // namespace kiln::nn
