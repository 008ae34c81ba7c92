#include "kiln/nn/printable.h"

#include <fmt/format.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln::nn {

std::string printable(const std::string& text) {
  std::string out;
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char b = bytes[i];
    size_t length = b < 0x80           ? 1
                    : (b >> 5) == 0x6  ? 2
                    : (b >> 4) == 0xe  ? 3
                    : (b >> 3) == 0x1e ? 4
                                       : 0;
    bool ok = length > 0 && i + length <= n && !(b < 0x20 || b == 0x7f);
    for (size_t k = 1; ok && k < length; ++k) ok = (bytes[i + k] & 0xc0) == 0x80;
    if (ok) {
      out.append(text, i, length);
      i += length;
    } else {
      out += fmt::format("\\x{:02x}", b);
      i += 1;
    }
  }
  return out;
}

bool valid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char b = bytes[i];
    const size_t length = b < 0x80           ? 1
                          : (b >> 5) == 0x6  ? 2
                          : (b >> 4) == 0xe  ? 3
                          : (b >> 3) == 0x1e ? 4
                                             : 0;
    if (length == 0 || length > n - i) return false;
    for (size_t k = 1; k < length; ++k)
      if ((bytes[i + k] & 0xc0) != 0x80) return false;
    i += length;
  }
  return true;
}

}  // namespace kiln::nn
