// The device switch: the one place where kiln chooses between an op's CPU and CUDA kernels.
//
// Each kernel family (kernels/<family>.h) is a table of function pointers with one instance per
// device: Family::cpu, and Family::cuda (null in a build without CUDA). An entry point asks for its
// operands' device and calls through the table it gets:
//
//   kernels_for<ElementwiseKernels>("add", device).binary(BinaryOp::add, a, b, out, 1.0);
//
// For a GPU the table comes with that GPU made current (cuda::DeviceGuard), as PyTorch's generated
// OptionalDeviceGuard does for every CUDA op: kernels launch on the current device's current
// stream, so without it an op on a tensor of cuda:1 would launch on whichever GPU the thread had
// current. The guard lives as long as the table returned: to the end of the statement that calls
// through it, or, held in a variable (`const auto k = kernels_for<...>(...)`), to the end of that
// scope.
//
// What differs between devices beyond the code (whether a kernel takes 16-bit floats as they are,
// fuses an epilogue, or has a fused path at all) is a field of the table, so the entry points
// never branch on the device themselves. Autocast's dtype policy sits beside it (ops/autocast.h):
// an entry point under the policy casts its operands before it asks for a table.
#pragma once

#include <optional>

#include "kiln/core/cuda.h"
#include "kiln/core/device.h"
#include "kiln/core/error.h"

namespace kiln {

// A family's table of one device (a copy of a few pointers), holding that device current if it
// is a GPU.
template <class Family>
class DeviceKernels : public Family {
 public:
  DeviceKernels(const Family& table, Device device) : Family(table) {
    if (device.is_cuda()) guard_.emplace(device);
  }

 private:
  std::optional<cuda::DeviceGuard> guard_;
};

template <class Family>
DeviceKernels<Family> kernels_for(const char* op, Device device) {
  if (!device.is_cuda()) return {Family::cpu, device};
  KILN_CHECK(Family::cuda != nullptr, DeviceError,
             "{}: kiln was built without CUDA, so no tensor can be on {}", op, device.str());
  return {*Family::cuda, device};
}

}  // namespace kiln
