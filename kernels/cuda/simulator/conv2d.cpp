// The CUDA simulator's conv2d (KILN_CUDA=SIM, docs/simulator.md): cuDNN is not simulated, so in
// this build conv2d on a cuda device runs kiln's CPU kernels (kernels/cpu/conv2d.cpp) on the
// simulated device memory, which is host memory, in the CPU kernels' dtypes. Each call goes
// through sim::library_call on the current stream, where cuDNN would launch its kernels: it counts
// as a library call, and on a capturing stream it is recorded to run at each launch of the graph.
// Replaces kernels/cuda/conv2d.cpp in this build only (CMakeLists.txt).
#include "kiln/core/cuda.h"
#include "kiln/kernels/conv2d.h"
#include "kiln/kernels/cuda/simulator/borrowed.h"
#include "kiln/sim/grid.h"

namespace kiln {

namespace {

using sim_library::Borrowed;

void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
             const Conv2dGeometry& g) {
  sim::library_call("cuDNN convolution forward", cuda::current_stream_handle(),
                    [x = Borrowed(x), weight = Borrowed(weight), bias = Borrowed(bias),
                     out = Borrowed(out), g] { Conv2dKernels::cpu.forward(*x, *weight, *bias, *out, g); });
}

void backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                    const Conv2dGeometry& g) {
  sim::library_call("cuDNN convolution backward data", cuda::current_stream_handle(),
                    [grad_out = Borrowed(grad_out), weight = Borrowed(weight),
                     grad_x = Borrowed(grad_x), g] {
                      Conv2dKernels::cpu.backward_input(*grad_out, *weight, *grad_x, g);
                    });
}

void backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                     const Conv2dGeometry& g) {
  sim::library_call("cuDNN convolution backward filter", cuda::current_stream_handle(),
                    [grad_out = Borrowed(grad_out), x = Borrowed(x),
                     grad_weight = Borrowed(grad_weight), g] {
                      Conv2dKernels::cpu.backward_weight(*grad_out, *x, *grad_weight, g);
                    });
}

// takes_half false, as the CPU's table: f16 and bf16 go through f32.
const Conv2dKernels kSimulated{forward, backward_input, backward_weight, false};

}  // namespace

const Conv2dKernels* const Conv2dKernels::cuda = &kSimulated;

}  // namespace kiln
