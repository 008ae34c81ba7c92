// The device switch: the one place where kiln chooses between an op's CPU and CUDA kernels.
//
// Each kernel family (kernels/<family>.h) is a table of function pointers with one instance per
// device: Family::cpu, and Family::cuda (null in a build without CUDA). An entry point asks for its
// operands' device and calls through the table it gets:
//
//   kernels_for<ElementwiseKernels>("add", device).binary(BinaryOp::add, a, b, out, 1.0);
//
// What differs between devices beyond the code (whether a kernel takes 16-bit floats as they are,
// fuses an epilogue, or has a fused path at all) is a field of the table, so the entry points
// never branch on the device themselves. Autocast's dtype policy sits beside it (ops/autocast.h):
// an entry point under the policy casts its operands before it asks for a table.
#pragma once

#include "kiln/core/device.h"
#include "kiln/core/error.h"

namespace kiln {

template <class Family>
const Family& kernels_for(const char* op, Device device) {
  if (!device.is_cuda()) return Family::cpu;
  KILN_CHECK(Family::cuda != nullptr, DeviceError,
             "{}: kiln was built without CUDA, so no tensor can be on {}", op, device.str());
  return *Family::cuda;
}

}  // namespace kiln
