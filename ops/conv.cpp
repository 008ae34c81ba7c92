// conv2d and its two gradient ops: argument checks, the output geometry, the kernels (im2col +
// GEMM in kernels/cpu/conv2d.cpp, cuDNN in kernels/cuda/conv2d.cpp), and conv2d's backward written
// with the gradient ops.
#include "kiln/ops/conv.h"

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
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

void check_not_recording(const char* op, std::initializer_list<const Tensor*> inputs) {
  KILN_CHECK(!should_record(inputs), NotImplementedError,
             "{}: is not differentiable (conv2d has no double backward); call it under "
             "NoGradGuard or detach() the inputs",
             op);
}

// Kernels take contiguous buffers. The CPU computes in f32 or f64, so 16-bit floats go through
// f32 there; cuDNN takes them as they are and accumulates in f32.
DType compute_dtype(DType dtype, Device device) {
  if (kernels_for<Conv2dKernels>("conv2d", device).takes_half) return dtype;
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}

Tensor kernel_operand(const Tensor& t) {
  return t.defined() ? t.detach().to(compute_dtype(t.dtype(), t.device())).contiguous() : Tensor();
}

struct Conv2dBackward : Node {
  SavedTensor x, weight;
  ConvParams params;
  std::string name() const override { return "Conv2dBackward"; }
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
    out = empty(output_shape(g), compute_dtype(x.dtype(), x.device()), x.device());
    kernels_for<Conv2dKernels>("conv2d_forward", x.device()).forward(kernel_operand(x), kernel_operand(weight), kernel_operand(bias), out, g);
    out = out.to(x.dtype());
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
  check_not_recording(op, {&grad_output, &weight});
  // Without an output channel (or input channel) there is no term to sum: a zero gradient.
  if (!has_work(g) || empty_sum(g)) return zeros(input_shape, weight.dtype(), weight.device());
  Tensor grad_x =
      empty(input_shape, compute_dtype(weight.dtype(), weight.device()), weight.device());
  kernels_for<Conv2dKernels>("conv2d_backward_input", weight.device()).backward_input(kernel_operand(grad_output), kernel_operand(weight), grad_x, g);
  return grad_x.to(weight.dtype());
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
  check_not_recording(op, {&grad_output, &input});
  // An empty batch (or no output position) contributes no term: a zero gradient.
  if (!has_work(g) || empty_sum(g)) return zeros(weight_shape, input.dtype(), input.device());
  Tensor grad_weight =
      empty(weight_shape, compute_dtype(input.dtype(), input.device()), input.device());
  kernels_for<Conv2dKernels>("conv2d_backward_weight", input.device()).backward_weight(kernel_operand(grad_output), kernel_operand(input), grad_weight, g);
  return grad_weight.to(input.dtype());
}

}  // namespace kiln
