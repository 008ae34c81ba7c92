#include "kiln/core/device.h"

#include <fmt/format.h>

#include <ostream>
#include <string>

#include "kiln/core/error.h"

namespace kiln {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string digits = text.substr(5);
    bool all_digits = !digits.empty() && digits.size() < 6 &&
                      digits.find_first_not_of("0123456789") == std::string::npos;
    KILN_CHECK(all_digits, ValueError, "Device::parse: bad device index in '{}' (expected cuda:N)",
               text);
    return cuda(std::stoi(digits));
  }
  throw ValueError(
      fmt::format("Device::parse: unknown device '{}' (expected cpu, cuda or cuda:N)", text));
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index);
}

std::ostream& operator<<(std::ostream& out, const Device& device) {
  return out << device.str();
}

}  // namespace kiln
