// conv2d and its two gradient ops: argument checks, the output geometry, the call into the
// device's kernels, conv2d's backward written with the gradient ops, and theirs (double backward)
// written with conv2d and each other. Which implementation runs is the kernels' choice: on the
// CPU kernels/cpu/conv2d/choice.cpp picks per pass and shape among kiln's direct kernels,
// oneDNN's and im2col + GEMM (f64's only ones), by a fixed rule or by timing them
// (backends::CpuConv); on the GPU (kernels/cuda/conv2d/) cuDNN, through its graph API or its
// legacy one.
#include "kiln/ops/conv.h"

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/cuda.h"
#include "kiln/core/profiler.h"
#include "kiln/kernels/conv2d.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"

namespace kiln {

namespace {

struct ConvParams {
  Pair stride, padding, dilation;
  int64_t groups;
};

Conv2dGeometry conv_geometry(const char* op, const Shape& input, const Shape& weight,
                             const ConvParams& p) {
  KILN_CHECK(input.size() == 4, ShapeError, "{}: expected input of shape [N, C, H, W], got {}", op,
             shape_str(input));
  KILN_CHECK(weight.size() == 4, ShapeError,
             "{}: expected weight of shape [O, C/groups, kH, kW], got {}", op, shape_str(weight));
  check_shape(op, input);
  check_shape(op, weight);
  KILN_CHECK(p.stride[0] >= 1 && p.stride[1] >= 1, ValueError,
             "{}: stride must be at least 1, got [{}, {}]", op, p.stride[0], p.stride[1]);
  KILN_CHECK(p.dilation[0] >= 1 && p.dilation[1] >= 1, ValueError,
             "{}: dilation must be at least 1, got [{}, {}]", op, p.dilation[0], p.dilation[1]);
  KILN_CHECK(p.padding[0] >= 0 && p.padding[1] >= 0, ValueError,
             "{}: padding must be non-negative, got [{}, {}]", op, p.padding[0], p.padding[1]);
  KILN_CHECK(p.groups >= 1, ValueError, "{}: groups must be at least 1, got {}", op, p.groups);
  KILN_CHECK(weight[2] >= 1 && weight[3] >= 1, ShapeError,
             "{}: expected a kernel of at least 1x1, got weight {}", op, shape_str(weight));
  KILN_CHECK(weight[1] * p.groups == input[1], ShapeError,
             "{}: input {} has {} channels but weight {} with groups = {} expects {}", op,
             shape_str(input), input[1], shape_str(weight), p.groups, weight[1] * p.groups);
  KILN_CHECK(weight[0] % p.groups == 0, ShapeError,
             "{}: weight {} has {} output channels, not divisible by groups = {}", op,
             shape_str(weight), weight[0], p.groups);
  const int64_t span_h = p.dilation[0] * (weight[2] - 1) + 1;
  const int64_t span_w = p.dilation[1] * (weight[3] - 1) + 1;
  const int64_t padded_h = input[2] + 2 * p.padding[0], padded_w = input[3] + 2 * p.padding[1];
  KILN_CHECK(span_h <= padded_h && span_w <= padded_w, ShapeError,
             "{}: kernel {}x{} (dilation [{}, {}]) spans {}x{}, larger than the padded input {}x{} "
             "(input {}, padding [{}, {}])",
             op, weight[2], weight[3], p.dilation[0], p.dilation[1], span_h, span_w, padded_h,
             padded_w, shape_str(input), p.padding[0], p.padding[1]);
  // As PyTorch: an empty batch or no channel gives an empty output or the bias alone, but an
  // image with no pixel is refused even where padding would give it an output.
  KILN_CHECK(input[0] == 0 || input[1] == 0 || (input[2] > 0 && input[3] > 0), ShapeError,
             "{}: only an empty batch or zero channels may make the input empty, got an input of "
             "height {} and width {}: {}",
             op, input[2], input[3], shape_str(input));
  Conv2dGeometry g;
  g.batch = input[0], g.in_channels = input[1], g.in_h = input[2], g.in_w = input[3];
  g.out_channels = weight[0], g.kernel_h = weight[2], g.kernel_w = weight[3];
  g.out_h = (padded_h - span_h) / p.stride[0] + 1;
  g.out_w = (padded_w - span_w) / p.stride[1] + 1;
  g.stride_h = p.stride[0], g.stride_w = p.stride[1];
  g.pad_h = p.padding[0], g.pad_w = p.padding[1];
  g.dilation_h = p.dilation[0], g.dilation_w = p.dilation[1];
  g.groups = p.groups;
  return g;
}

Shape output_shape(const Conv2dGeometry& g) {
  return {g.batch, g.out_channels, g.out_h, g.out_w};
}

// The kernels (CPU and cuDNN alike) are only called with every operand non-empty: the output has
// an element, and each one sums at least one product. The zero-size cases are settled here, once
// for both devices.
bool has_work(const Conv2dGeometry& g) {
  return g.batch > 0 && g.out_channels > 0 && g.out_h > 0 && g.out_w > 0;
}
bool empty_sum(const Conv2dGeometry& g) {
  return g.in_channels == 0;
}

void check_grad_output(const char* op, const Tensor& grad_output, const Conv2dGeometry& g) {
  KILN_CHECK(grad_output.shape() == output_shape(g), ShapeError,
             "{}: expected grad_output of shape {} (conv2d's output), got {}", op,
             shape_str(output_shape(g)), describe(grad_output));
}

// The layout of conv2d's result and gradients: channels_last when either operand suggests it, as
// PyTorch's cudnn_conv_suggest_memory_format.
MemoryFormat conv_format(const Tensor& a, const Tensor& b) {
  const bool channels_last = a.suggest_memory_format() == MemoryFormat::channels_last ||
                             b.suggest_memory_format() == MemoryFormat::channels_last;
  return channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

// Says once per process that bf16 convolutions on `device` compute in f32 (KernelCall).
void tell_bf16_as_f32(int device) {
  static std::once_flag told;
  std::call_once(told, [&] {
    const cuda::DeviceProperties gpu = cuda::get_device_properties(device);
    std::fprintf(stderr,
                 "kiln: conv2d: cuda:%d (%s) is compute capability %d.%d, and cuDNN has bf16 "
                 "convolutions from 8.0 on only: bf16 convolutions there compute in f32 "
                 "(ops/conv.cpp)\n",
                 device, gpu.name.c_str(), gpu.major, gpu.minor);
  });
}

// How one call reaches a device's kernels. Both tables take 16-bit floats as they are (the CPU's
// kernels widen them to f32 where no direct path takes them; cuDNN accumulates in f32); a table
// without takes_half would get f32 here. The CPU takes contiguous operands, so a channels-last
// result is laid out afterwards; cuDNN takes channels-last operands as they are. cuDNN has no
// double-precision kernels for NHWC operands, so f64 reaches it in NCHW and the result is laid
// out afterwards (PyTorch's cudnn_conv_suggest_memory_format keeps f64 in NCHW). Nor has it bf16
// kernels below compute capability 8.0 (takes_bf16): there bf16 goes in as f32 copies and the
// result is rounded back, as PyTorch routes bf16 away from cuDNN on such a GPU; the first such
// call says so on stderr.
struct KernelCall {
  KernelCall(const char* op, Device device, MemoryFormat format, DType dtype)
      : kernels(kernels_for<Conv2dKernels>(op, device)),
        result_format(format),
        kernel_format(
            kernels.takes_channels_last && dtype != DType::f64 ? format : MemoryFormat::contiguous),
        bf16_as_f32(dtype == DType::bf16 && device.is_cuda() && kernels.takes_bf16 != nullptr &&
                    !kernels.takes_bf16(device.index)) {
    if (bf16_as_f32) tell_bf16_as_f32(device.index);
  }

  DType compute_dtype(DType dtype) const {
    if (kernels.takes_half && !(dtype == DType::bf16 && bf16_as_f32)) return dtype;
    return dtype == DType::f64 ? DType::f64 : DType::f32;
  }
  // An operand as the kernels take it: detached, in the compute dtype, in their layout (a 1-D
  // bias is contiguous in every layout).
  Tensor operand(const Tensor& t) const {
    if (!t.defined()) return Tensor();
    const Tensor cast = t.detach().to(compute_dtype(t.dtype()));
    return cast.contiguous(cast.dim() == 4 ? kernel_format : MemoryFormat::contiguous);
  }
  // A new buffer for the kernels to write.
  Tensor output(const Shape& shape, DType dtype, Device device) const {
    return empty(shape, compute_dtype(dtype), device, kernel_format);
  }
  // What the kernels wrote, in the caller's dtype and layout.
  Tensor result(const Tensor& written, DType dtype) const {
    return written.to(dtype).to(result_format);
  }

  DeviceKernels<Conv2dKernels> kernels;
  MemoryFormat result_format, kernel_format;
  bool bf16_as_f32;  // the device's kernels take no bf16: the op's f32 copies go in
};

struct Conv2dBackward : Node {
  SavedTensor x, weight;
  ConvParams params;
  std::string name() const override { return "Conv2dBackward"; }
  // Its two gradient ops record their own backward (below), so it can be differentiated again.
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor tx = x.unpack(*this), tw = weight.unpack(*this);
    const ConvParams& p = params;
    Tensor gx, gw, gb;
    if (next_edges[0].valid())
      gx = conv2d_backward_input(g, tw, tx.shape(), p.stride, p.padding, p.dilation, p.groups);
    if (next_edges[1].valid())
      gw = conv2d_backward_weight(g, tx, tw.shape(), p.stride, p.padding, p.dilation, p.groups);
    if (next_edges[2].valid()) gb = sum(g, {0, 2, 3});
    return {gx, gw, gb};
  }
  void release_saved() override { x.reset(), weight.reset(); }
};

// The gradient ops are bilinear, so their own gradients are convolutions again:
// <G, backward_input(g, w)> = <conv2d(G, w), g>, whose gradient in w is backward_weight(g, G);
// <G, backward_weight(g, x)> = <conv2d(x, G), g>, whose gradient in x is backward_input(g, G).
// Each is written with recorded ops, so derivatives of any order follow.
struct Conv2dBackwardInputBackward : Node {
  SavedTensor grad_output, weight;
  ConvParams params;
  std::string name() const override { return "Conv2dBackwardInputBackward"; }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& grad) override {
    const Tensor g = grad_output.unpack(*this), w = weight.unpack(*this);
    const Tensor gc = grad.to(w.dtype());
    const ConvParams& p = params;
    Tensor for_g, for_w;
    if (next_edges[0].valid())
      for_g = conv2d(gc, w, Tensor(), p.stride, p.padding, p.dilation, p.groups);
    if (next_edges[1].valid())
      for_w = conv2d_backward_weight(g, gc, w.shape(), p.stride, p.padding, p.dilation, p.groups);
    return {for_g, for_w};
  }
  void release_saved() override { grad_output.reset(), weight.reset(); }
};

struct Conv2dBackwardWeightBackward : Node {
  SavedTensor grad_output, input;
  ConvParams params;
  std::string name() const override { return "Conv2dBackwardWeightBackward"; }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& grad) override {
    const Tensor g = grad_output.unpack(*this), x = input.unpack(*this);
    const Tensor gc = grad.to(x.dtype());
    const ConvParams& p = params;
    Tensor for_g, for_x;
    if (next_edges[0].valid())
      for_g = conv2d(x, gc, Tensor(), p.stride, p.padding, p.dilation, p.groups);
    if (next_edges[1].valid())
      for_x = conv2d_backward_input(g, gc, x.shape(), p.stride, p.padding, p.dilation, p.groups);
    return {for_g, for_x};
  }
  void release_saved() override { grad_output.reset(), input.reset(); }
};

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding,
              Pair dilation, int64_t groups) {
  if (AutocastArgs cast{"conv2d", {&x, &weight, &bias}})
    return conv2d(cast[0], cast[1], cast[2], stride, padding, dilation, groups);
  profiler::OpScope profile("conv2d", {&x, &weight, &bias});
  require_same_floating("conv2d", x, weight, "input", "weight");
  const ConvParams params{stride, padding, dilation, groups};
  const Conv2dGeometry g = conv_geometry("conv2d", x.shape(), weight.shape(), params);
  if (bias.defined()) {
    require_same_floating("conv2d", x, bias, "input", "bias");
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == g.out_channels, ShapeError,
               "conv2d: expected bias of shape [{}] to match weight {}, got {}", g.out_channels,
               describe(weight), describe(bias));
  }
  Tensor out;
  if (empty_sum(g)) {
    // No input channel: every output is an empty sum, so the output is the bias alone.
    out = zeros(output_shape(g), x.dtype(), x.device());
    if (bias.defined() && out.numel() > 0) {
      NoGradGuard no_grad;
      out = add(out, bias.detach().view({1, g.out_channels, 1, 1}));
    }
  } else if (has_work(g)) {
    const KernelCall call("conv2d_forward", x.device(), conv_format(x, weight), x.dtype());
    Tensor written = call.output(output_shape(g), x.dtype(), x.device());
    call.kernels.forward(call.operand(x), call.operand(weight), call.operand(bias), written, g);
    out = call.result(written, x.dtype());
  } else {
    out = empty(output_shape(g), x.dtype(), x.device());
  }
  if (should_record({&x, &weight, &bias})) {
    auto node = std::make_shared<Conv2dBackward>();
    node->x = SavedTensor(x);
    node->weight = SavedTensor(weight);
    node->params = params;
    record(out, node, {&x, &weight, &bias});
  }
  return out;
}

Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight,
                             const Shape& input_shape, Pair stride, Pair padding, Pair dilation,
                             int64_t groups) {
  const char* op = "conv2d_backward_input";
  profiler::OpScope profile(op, {&grad_output, &weight});
  require_same_floating(op, grad_output, weight, "grad_output", "weight");
  const Conv2dGeometry g =
      conv_geometry(op, input_shape, weight.shape(), {stride, padding, dilation, groups});
  check_grad_output(op, grad_output, g);
  // Without an output channel (or input channel) there is no term to sum: a zero gradient.
  if (!has_work(g) || empty_sum(g)) return zeros(input_shape, weight.dtype(), weight.device());
  const KernelCall call(op, weight.device(), conv_format(grad_output, weight), weight.dtype());
  Tensor grad_x = call.output(input_shape, weight.dtype(), weight.device());
  call.kernels.backward_input(call.operand(grad_output), call.operand(weight), grad_x, g);
  Tensor out = call.result(grad_x, weight.dtype());
  if (should_record({&grad_output, &weight})) {
    auto node = std::make_shared<Conv2dBackwardInputBackward>();
    node->grad_output = SavedTensor(grad_output);
    node->weight = SavedTensor(weight);
    node->params = {stride, padding, dilation, groups};
    record(out, node, {&grad_output, &weight});
  }
  return out;
}

Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& input,
                              const Shape& weight_shape, Pair stride, Pair padding, Pair dilation,
                              int64_t groups) {
  const char* op = "conv2d_backward_weight";
  profiler::OpScope profile(op, {&grad_output, &input});
  require_same_floating(op, grad_output, input, "grad_output", "input");
  const Conv2dGeometry g =
      conv_geometry(op, input.shape(), weight_shape, {stride, padding, dilation, groups});
  check_grad_output(op, grad_output, g);
  // An empty batch (or no output position) contributes no term: a zero gradient.
  if (!has_work(g) || empty_sum(g)) return zeros(weight_shape, input.dtype(), input.device());
  const KernelCall call(op, input.device(), conv_format(grad_output, input), input.dtype());
  Tensor grad_weight = call.output(weight_shape, input.dtype(), input.device());
  call.kernels.backward_weight(call.operand(grad_output), call.operand(input), grad_weight, g);
  Tensor out = call.result(grad_weight, input.dtype());
  if (should_record({&grad_output, &input})) {
    auto node = std::make_shared<Conv2dBackwardWeightBackward>();
    node->grad_output = SavedTensor(grad_output);
    node->input = SavedTensor(input);
    node->params = {stride, padding, dilation, groups};
    record(out, node, {&grad_output, &input});
  }
  return out;
}

}  // namespace kiln
