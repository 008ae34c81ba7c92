// The device switch (ops/dispatch.h), with a family of its own whose kernels report what they see:
// the CPU table for a CPU tensor, and for a GPU tensor the CUDA table with that GPU made current
// before the kernel runs, whatever device the thread had current.
#include <catch2/catch.hpp>

#include "kiln/core/cuda.h"
#include "kiln/core/device.h"
#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"

using namespace kiln;

namespace {

// How many kernels of the family have run since the test reset it.
int calls = 0;

struct ProbeKernels {
  // The device the kernel runs on: -1 for the CPU, the current GPU for CUDA.
  int (*device)();

  static const ProbeKernels cpu;
  static const ProbeKernels* const cuda;
};

int cpu_device() {
  ++calls;
  return -1;
}

int cuda_device() {
  ++calls;
  return cuda::current_device();
}

const ProbeKernels kProbeCuda{cuda_device};

const ProbeKernels ProbeKernels::cpu{cpu_device};
const ProbeKernels* const ProbeKernels::cuda = &kProbeCuda;

}  // namespace

TEST_CASE("dispatch: a CPU device gets the CPU table and touches no GPU") {
  calls = 0;
  CHECK(kernels_for<ProbeKernels>("probe", Device::cpu()).device() == -1);
  CHECK(calls == 1);
}

TEST_CASE("dispatch: a call through the CUDA table runs with the operands' GPU current") {
  calls = 0;
  if (cuda::device_count() < 2) {
    // cuda:1 cannot be made current here (one GPU, none, or a build without CUDA), so the switch
    // must fail before the kernel runs: a kernel that ran would launch on whichever GPU is current.
    CHECK_THROWS_AS(kernels_for<ProbeKernels>("probe", Device::cuda(1)).device(), DeviceError);
    CHECK(calls == 0);
    return;
  }
  cuda::set_device(0);
  CHECK(kernels_for<ProbeKernels>("probe", Device::cuda(1)).device() == 1);
  CHECK(cuda::current_device() == 0);
  {
    // Held in a variable, the table keeps its GPU current for the rest of the scope.
    const auto probe = kernels_for<ProbeKernels>("probe", Device::cuda(1));
    CHECK(cuda::current_device() == 1);
    CHECK(probe.device() == 1);
  }
  CHECK(cuda::current_device() == 0);
  CHECK(calls == 2);
}
