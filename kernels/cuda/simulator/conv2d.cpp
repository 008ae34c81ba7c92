// The CUDA simulator's conv2d (KILN_CUDA=SIM, docs/simulator.md): cuDNN is not simulated, so in
// this build conv2d on a cuda device runs kiln's CPU kernels (kernels/cpu/conv2d.cpp) on the
// simulated device memory, which is host memory, in the CPU kernels' dtypes; each call is noted
// as a library call (sim::library_calls) where cuDNN would launch its kernels. Replaces
// kernels/cuda/conv2d.cpp in this build only (CMakeLists.txt).
//
// It takes what cuDNN's table takes, so the ops above run as they do on a GPU: channels-last
// operands (copied to contiguous and back around the CPU kernels), and, for f32 with
// backends::cudnn_allow_tf32() (the default, as PyTorch's), TF32 tensor-core numerics: both
// operands rounded to TF32 (10 mantissa bits, to nearest with ties away from zero, as PTX's
// cvt.rna.tf32.f32), products summed in f32. cuDNN's own kernels may round differently, so this
// reproduces TF32's error, not its bits.
#include <cstdint>
#include <cstring>

#include "kiln/core/backends.h"
#include "kiln/kernels/conv2d.h"
#include "kiln/kernels/copy.h"
#include "kiln/kernels/layout.h"
#include "kiln/sim/grid.h"

namespace kiln {

namespace {

float round_to_tf32(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) != 0x7f800000u) {  // inf and NaN pass as they are
    bits += 0x1000u;                          // half of the 13 bits dropped: ties away from zero
    bits &= ~0x1fffu;
  }
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

bool rounds_to_tf32(const Tensor& t) {
  return t.dtype() == DType::f32 && backends::cudnn_allow_tf32();
}

// A multiplied operand as the CPU kernels take it: contiguous, and TF32-rounded where cuDNN's
// tensor cores would round it. x itself when it is already so.
Tensor cpu_operand(const Tensor& x) {
  const bool tf32 = rounds_to_tf32(x);
  if (!tf32) return contiguous_with(CopyKernels::cpu, x);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  CopyKernels::cpu.copy(x, out);
  float* data = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) data[i] = round_to_tf32(data[i]);
  return out;
}

// Runs `compute` into a contiguous buffer when `out` is laid out otherwise, then copies it there.
template <class F>
void into(const Tensor& out, F compute) {
  if (out.is_contiguous()) return compute(out);
  Tensor buffer = empty(out.shape(), out.dtype(), out.device());
  compute(buffer);
  CopyKernels::cpu.copy(buffer, out);
}

void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
             const Conv2dGeometry& g) {
  sim::note_library_call("cudnn convolution forward");
  const Tensor cx = cpu_operand(x), cw = cpu_operand(weight);
  into(out, [&](const Tensor& o) { Conv2dKernels::cpu.forward(cx, cw, bias, o, g); });
}

void backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                    const Conv2dGeometry& g) {
  sim::note_library_call("cudnn convolution backward data");
  const Tensor cg = cpu_operand(grad_out), cw = cpu_operand(weight);
  into(grad_x, [&](const Tensor& o) { Conv2dKernels::cpu.backward_input(cg, cw, o, g); });
}

void backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                     const Conv2dGeometry& g) {
  sim::note_library_call("cudnn convolution backward filter");
  const Tensor cg = cpu_operand(grad_out), cx = cpu_operand(x);
  into(grad_weight, [&](const Tensor& o) { Conv2dKernels::cpu.backward_weight(cg, cx, o, g); });
}

// takes_half false: f16 and bf16 reach the CPU kernels as f32 copies made by the op.
// takes_channels_last true, as cuDNN's.
const Conv2dKernels kSimulated{.forward = forward,
                               .backward_input = backward_input,
                               .backward_weight = backward_weight,
                               .takes_half = false,
                               .takes_channels_last = true};

}  // namespace

const Conv2dKernels* const Conv2dKernels::cuda = &kSimulated;

}  // namespace kiln
