// The CUDA simulator's conv2d (KILN_CUDA=SIM, docs/simulator.md): cuDNN is not simulated, so in
// this build conv2d on a cuda device runs kiln's CPU kernels (kernels/cpu/conv2d/choice.cpp) on the
// simulated device memory, which is host memory, in the CPU kernels' dtypes. Each call goes
// through sim::library_call on the current stream, where cuDNN would launch its kernels: it counts
// as a library call, and on a capturing stream it is recorded to run at each launch of the graph.
// Replaces kernels/cuda/conv2d.cpp in this build only (CMakeLists.txt).
//
// It takes what cuDNN's table takes, so the ops above run as they do on a GPU: channels-last
// operands (copied to contiguous and back around the CPU kernels), and, for f32 with
// backends::cudnn_allow_tf32() (the default, as PyTorch's), TF32 tensor-core numerics: both
// operands rounded to TF32 (10 mantissa bits, to nearest with ties away from zero, as PTX's
// cvt.rna.tf32.f32), products summed in f32. cuDNN's own kernels may round differently, so this
// reproduces TF32's error, not its bits. Whether TF32 applies is decided when the op runs (at
// capture for a graph), as cuDNN fixes the math mode in the plan it launches.
#include "kiln/kernels/conv2d.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "kiln/core/backends.h"
#include "kiln/core/cuda.h"
#include "kiln/core/error.h"
#include "kiln/kernels/copy.h"
#include "kiln/kernels/cuda/simulator/borrowed.h"
#include "kiln/sim/grid.h"

namespace kiln {

namespace {

using sim_library::Borrowed;

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
// tensor cores would round it. x itself when it is already so. A copy is host memory: the call
// may run inside any cudart call that waits for its stream (lazy streams, docs/simulator.md),
// the caching allocator's among them, so it must not allocate through that allocator, as a
// library's kernels never do.
Tensor cpu_operand(const Tensor& x, bool tf32) {
  if (!tf32 && x.is_contiguous()) return x;
  Tensor out = empty(x.shape(), x.dtype(), Device::cpu());
  CopyKernels::cpu.copy(x, out);
  if (!tf32) return out;
  float* data = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) data[i] = round_to_tf32(data[i]);
  return out;
}

// Runs `compute` into a contiguous buffer (host memory, as cpu_operand's) when `out` is laid out
// otherwise, then copies it there.
template <class F>
void into(const Tensor& out, F compute) {
  if (out.is_contiguous()) return compute(out);
  Tensor buffer = empty(out.shape(), out.dtype(), Device::cpu());
  compute(buffer);
  CopyKernels::cpu.copy(buffer, out);
}

// cuDNN has no double-precision kernels for NHWC operands (PyTorch's
// cudnn_conv_suggest_memory_format keeps f64 in NCHW for that reason): refused here as cuDNN
// refuses it, so that a path sending them fails in the simulator as it would on a GPU.
void require_cudnn_supports(const char* call, std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands)
    if (t->defined() && t->dim() == 4 && t->dtype() == DType::f64 && !t->is_contiguous())
      throw NotImplementedError(std::string(call) +
                                ": cuDNN has no f64 kernels for channels-last (NHWC) operands "
                                "(CUDNN_STATUS_NOT_SUPPORTED); the simulator refuses what cuDNN "
                                "refuses");
}

void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
             const Conv2dGeometry& g) {
  require_cudnn_supports("cudnn convolution forward", {&x, &weight, &out});
  sim::library_call(
      "cudnn convolution forward", cuda::current_stream_handle(),
      [x = Borrowed(x), weight = Borrowed(weight), bias = Borrowed(bias), out = Borrowed(out), g,
       tf32 = rounds_to_tf32(x)] {
        const Tensor cx = cpu_operand(*x, tf32), cw = cpu_operand(*weight, tf32);
        into(*out, [&](const Tensor& o) { Conv2dKernels::cpu.forward(cx, cw, *bias, o, g); });
      });
}

void backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                    const Conv2dGeometry& g) {
  require_cudnn_supports("cudnn convolution backward data", {&grad_out, &weight, &grad_x});
  sim::library_call(
      "cudnn convolution backward data", cuda::current_stream_handle(),
      [grad_out = Borrowed(grad_out), weight = Borrowed(weight), grad_x = Borrowed(grad_x), g,
       tf32 = rounds_to_tf32(grad_out)] {
        const Tensor cg = cpu_operand(*grad_out, tf32);
        const Tensor cw = cpu_operand(*weight, tf32);
        into(*grad_x, [&](const Tensor& o) { Conv2dKernels::cpu.backward_input(cg, cw, o, g); });
      });
}

void backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                     const Conv2dGeometry& g) {
  require_cudnn_supports("cudnn convolution backward filter", {&grad_out, &x, &grad_weight});
  sim::library_call("cudnn convolution backward filter", cuda::current_stream_handle(),
                    [grad_out = Borrowed(grad_out), x = Borrowed(x),
                     grad_weight = Borrowed(grad_weight), g, tf32 = rounds_to_tf32(grad_out)] {
                      const Tensor cg = cpu_operand(*grad_out, tf32), cx = cpu_operand(*x, tf32);
                      into(*grad_weight, [&](const Tensor& o) {
                        Conv2dKernels::cpu.backward_weight(cg, cx, o, g);
                      });
                    });
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
