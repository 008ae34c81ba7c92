// The CUDA simulator's conv2d (KILN_CUDA=SIM, docs/simulator.md): cuDNN is not simulated, so in
// this build conv2d on a cuda device runs kiln's CPU kernels (kernels/cpu/conv2d.cpp) on the
// simulated device memory, which is host memory, in the CPU kernels' dtypes; each call is noted
// as a library call (sim::library_calls) where cuDNN would launch its kernels. Replaces
// kernels/cuda/conv2d.cpp in this build only (CMakeLists.txt).
#include "kiln/kernels/conv2d.h"
#include "kiln/sim/grid.h"

namespace kiln {

namespace {

void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
             const Conv2dGeometry& g) {
  sim::note_library_call("cudnn convolution forward");
  Conv2dKernels::cpu.forward(x, weight, bias, out, g);
}

void backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                    const Conv2dGeometry& g) {
  sim::note_library_call("cudnn convolution backward data");
  Conv2dKernels::cpu.backward_input(grad_out, weight, grad_x, g);
}

void backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                     const Conv2dGeometry& g) {
  sim::note_library_call("cudnn convolution backward filter");
  Conv2dKernels::cpu.backward_weight(grad_out, x, grad_weight, g);
}

// takes_half false, as the CPU's table: f16 and bf16 go through f32.
const Conv2dKernels kSimulated{forward, backward_input, backward_weight, false};

}  // namespace

const Conv2dKernels* const Conv2dKernels::cuda = &kSimulated;

}  // namespace kiln
