// Text from a file, made safe to quote in an error message.
#pragma once

#include <string>
#include <string_view>

namespace kiln::nn {

// `text` with each byte that is not part of a UTF-8 sequence, and each control character, as
// \xNN: a damaged file's bytes, quoted in an error, must not reach a terminal raw.
std::string printable(const std::string& text);

// Whether `text` is well-formed UTF-8 (by its sequence lengths and continuation bytes).
bool valid_utf8(std::string_view text);

}  // namespace kiln::nn
