// Device: where a tensor's storage lives. CPU always exists; CUDA devices exist when kiln was built
// with CUDA and a GPU is visible at run time (see core/cuda.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  // Parses "cpu", "cuda", "cuda:1".
  static Device parse(const std::string& text);

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;  // "cpu", "cuda:0"
  bool operator==(const Device&) const = default;
};

std::ostream& operator<<(std::ostream& out, const Device& device);  // "cuda:0", as str()

}  // namespace kiln
