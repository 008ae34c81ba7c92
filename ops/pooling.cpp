// Pooling entry points: PyTorch's window and output-size rules, the kernel call on a 4-D
// [N, C, H, W] operand (contiguous, or channels-last where the device's kernels take it), and each
// op's backward node next to its forward. 3-D [C, H, W] inputs are pooled as a batch of one.
// Results keep the input's memory format (the gradients, grad_output's).
#include "kiln/ops/pooling.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/profiler.h"
#include "kiln/kernels/pooling.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"

namespace kiln {

namespace {

void check_pool_input(const char* op, const Tensor& x, const char* argument = "input") {
  require_defined(op, x, argument);
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError,
             "{}: expected a 3-D [C, H, W] or 4-D [N, C, H, W] {}, got {}", op, argument,
             describe(x));
  require_floating(op, x, argument);
  // Only the batch may be empty: an empty plane has no window to pool.
  for (int64_t d = x.dim() - 3; d < x.dim(); ++d)
    KILN_CHECK(x.size(d) > 0, ShapeError, "{}: expected non-zero C, H and W in the {}, got {}", op,
               argument, describe(x));
}

void check_input_shape(const char* op, const Shape& input_shape) {
  KILN_CHECK(input_shape.size() == 3 || input_shape.size() == 4, ShapeError,
             "{}: expected a 3-D or 4-D input_shape, got {}", op, shape_str(input_shape));
  check_shape(op, input_shape);
}

// The kernels compute in f32 or f64; the 16-bit floats go through f32 (but bf16 into a max_pool2d
// that takes it: kernels/pooling.h).
DType compute_dtype(DType dtype) {
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}

Tensor batched(const Tensor& t) {
  return t.dim() == 3 ? t.unsqueeze(0) : t;
}
Shape batched(const Shape& s) {
  if (s.size() == 4) return s;
  Shape out = {1};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

// How one call reaches its device's kernels: 4-D operands in f32 or f64, laid out as `like` (the
// input, or grad_output) where the kernels take channels-last, else contiguous; the results then
// laid out as `like` was.
struct PoolCall {
  PoolCall(const char* op, Device device, const Tensor& like)
      : kernels(kernels_for<PoolingKernels>(op, device)),
        result_format(like.dim() == 4 ? like.suggest_memory_format() : MemoryFormat::contiguous),
        kernel_format(kernels.takes_channels_last ? result_format : MemoryFormat::contiguous) {}

  // t as the kernels take it; floating tensors in the compute dtype (indices stay i64), or as they
  // are where keep_dtype.
  Tensor operand(const Tensor& t, bool keep_dtype = false) const {
    Tensor c = t.detach();
    if (is_floating(c.dtype()) && !keep_dtype) c = c.to(compute_dtype(c.dtype()));
    return batched(c).contiguous(kernel_format);
  }
  // A new buffer of the batched `shape` for the kernels to write; zeroed when they add into it.
  Tensor output(const Shape& shape, DType dtype, Device device, bool zeroed = false) const {
    Tensor t = empty(shape, dtype, device, kernel_format);
    if (zeroed) t.zero_();
    return t;
  }
  // What the kernels wrote, as the caller gets it: of `shape` (3-D when the input was), in
  // `dtype`, in the result format.
  Tensor result(const Tensor& written, const Shape& shape, DType dtype) const {
    const Tensor shaped = shape.size() == 3 ? written.view(shape) : written;
    return shaped.to(dtype).to(result_format);
  }

  DeviceKernels<PoolingKernels> kernels;
  MemoryFormat result_format, kernel_format;
};

Shape with_plane(const Shape& shape, int64_t h, int64_t w) {
  Shape out = shape;
  out[out.size() - 2] = h;
  out[out.size() - 1] = w;
  return out;
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// PyTorch's pooling_output_shape.
int64_t pooled_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation,
                    bool ceil_mode) {
  int64_t out =
      floor_div(in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) +
      1;
  // ceil_mode may add a window that would start past the input and its left padding, which
  // would pool nothing but padding; it is dropped.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

Pool2dGeometry pool_geometry(const char* op, const Shape& input_shape, Pair kernel, Pair stride,
                             Pair padding, Pair dilation, bool ceil_mode) {
  KILN_CHECK(kernel[0] > 0 && kernel[1] > 0, ValueError,
             "{}: kernel_size must be positive, got ({}, {})", op, kernel[0], kernel[1]);
  if (stride[0] == 0 && stride[1] == 0) stride = kernel;
  KILN_CHECK(stride[0] > 0 && stride[1] > 0, ValueError,
             "{}: stride must be positive (or (0, 0) for stride = kernel_size), got ({}, {})", op,
             stride[0], stride[1]);
  KILN_CHECK(dilation[0] > 0 && dilation[1] > 0, ValueError,
             "{}: dilation must be positive, got ({}, {})", op, dilation[0], dilation[1]);
  KILN_CHECK(padding[0] >= 0 && padding[1] >= 0, ValueError,
             "{}: padding must be non-negative, got ({}, {})", op, padding[0], padding[1]);
  KILN_CHECK(padding[0] <= kernel[0] / 2 && padding[1] <= kernel[1] / 2, ValueError,
             "{}: padding should be at most half of kernel_size, got padding ({}, {}) for "
             "kernel_size ({}, {})",
             op, padding[0], padding[1], kernel[0], kernel[1]);
  Pool2dGeometry g;
  g.in_h = input_shape[input_shape.size() - 2];
  g.in_w = input_shape[input_shape.size() - 1];
  g.kernel_h = kernel[0], g.kernel_w = kernel[1];
  g.stride_h = stride[0], g.stride_w = stride[1];
  g.pad_h = padding[0], g.pad_w = padding[1];
  g.dilation_h = dilation[0], g.dilation_w = dilation[1];
  g.out_h = pooled_size(g.in_h, g.kernel_h, g.pad_h, g.stride_h, g.dilation_h, ceil_mode);
  g.out_w = pooled_size(g.in_w, g.kernel_w, g.pad_w, g.stride_w, g.dilation_w, ceil_mode);
  KILN_CHECK(
      g.out_h >= 1 && g.out_w >= 1, ShapeError,
      "{}: input plane {}x{} is too small for kernel_size ({}, {}) with padding ({}, {}) and "
      "dilation ({}, {}): the output would be {}x{}",
      op, g.in_h, g.in_w, kernel[0], kernel[1], padding[0], padding[1], dilation[0], dilation[1],
      g.out_h, g.out_w);
  return g;
}

// grad_output must have the shape the forward produced from input_shape.
void check_grad_output(const char* op, const Tensor& grad_output, const Shape& input_shape,
                       int64_t out_h, int64_t out_w) {
  Shape expected = with_plane(input_shape, out_h, out_w);
  KILN_CHECK(grad_output.shape() == expected, ShapeError,
             "{}: expected grad_output of shape {} for input_shape {}, got {}", op,
             shape_str(expected), shape_str(input_shape), describe(grad_output));
}

// The three backwards are linear in the gradient alone (max pooling's through indices that are
// constant where it has a derivative), so each differentiates again through its transpose
// (record_adjoint): a max pool's takes each window's maximum's entry, an average pool's is the
// same average pool.
struct MaxPool2dBackward : Node {
  SavedTensor indices;
  Shape input_shape;
  std::string name() const override { return "MaxPool2dBackward"; }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor idx = indices.unpack(*this);
    Tensor out = max_pool2d_backward(g, idx, input_shape);
    record_adjoint(out, g, "MaxPool2dBackwardBackward", [idx](const Tensor& grad) {
      const int64_t plane = idx.dim() - 2;  // indices count within each H x W plane
      return gather(grad.flatten(plane), plane, idx.flatten(plane)).view(idx.shape());
    });
    return {out};
  }
  void release_saved() override { indices.reset(); }
};

struct AvgPool2dBackward : Node {
  Shape input_shape;
  Pair kernel_size, stride, padding;
  bool ceil_mode = false, count_include_pad = true;
  std::string name() const override { return "AvgPool2dBackward"; }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor out = avg_pool2d_backward(g, input_shape, kernel_size, stride, padding, ceil_mode,
                                     count_include_pad);
    record_adjoint(
        out, g, "AvgPool2dBackwardBackward",
        [k = kernel_size, s = stride, p = padding, ceil = ceil_mode, include = count_include_pad](
            const Tensor& grad) { return avg_pool2d(grad, k, s, p, ceil, include); });
    return {out};
  }
};

struct AdaptiveAvgPool2dBackward : Node {
  Shape input_shape;
  std::string name() const override { return "AdaptiveAvgPool2dBackward"; }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor out = adaptive_avg_pool2d_backward(g, input_shape);
    const Pair size{g.size(-2), g.size(-1)};
    record_adjoint(out, g, "AdaptiveAvgPool2dBackwardBackward",
                   [size](const Tensor& grad) { return adaptive_avg_pool2d(grad, size); });
    return {out};
  }
};

}  // namespace

MaxPool2dResult max_pool2d_with_indices(const Tensor& x, Pair kernel_size, Pair stride,
                                        Pair padding, Pair dilation, bool ceil_mode) {
  const char* op = "max_pool2d";
  profiler::OpScope profile(op, {&x});
  check_pool_input(op, x);
  Pool2dGeometry g =
      pool_geometry(op, x.shape(), kernel_size, stride, padding, dilation, ceil_mode);
  const PoolCall call(op, x.device(), x);
  const Tensor cx = call.operand(x, x.dtype() == DType::bf16 && call.kernels.max_pool_takes_bf16);
  const Shape out_shape = with_plane(cx.shape(), g.out_h, g.out_w);
  const Tensor values = call.output(out_shape, cx.dtype(), x.device());
  const Tensor indices = call.output(out_shape, DType::i64, x.device());
  call.kernels.max_pool2d(cx, values, indices, g);
  const Shape result_shape = with_plane(x.shape(), g.out_h, g.out_w);
  MaxPool2dResult result{call.result(values, result_shape, x.dtype()),
                         call.result(indices, result_shape, DType::i64)};
  if (should_record({&x})) {
    auto node = std::make_shared<MaxPool2dBackward>();
    node->indices = SavedTensor(result.indices);
    node->input_shape = x.shape();
    record(result.values, node, {&x});
  }
  return result;
}

Tensor max_pool2d(const Tensor& x, Pair kernel_size, Pair stride, Pair padding, Pair dilation,
                  bool ceil_mode) {
  return max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode).values;
}

Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                           const Shape& input_shape) {
  const char* op = "max_pool2d_backward";
  profiler::OpScope profile(op, {&grad_output, &indices});
  require_defined(op, grad_output, "grad_output");
  require_defined(op, indices, "indices");
  require_floating(op, grad_output, "grad_output");
  KILN_CHECK(indices.dtype() == DType::i64, DTypeError, "{}: expected i64 indices, got {}", op,
             describe(indices));
  check_input_shape(op, input_shape);
  common_device(op, {&grad_output, &indices});
  KILN_CHECK(grad_output.dim() == static_cast<int64_t>(input_shape.size()), ShapeError,
             "{}: expected grad_output with as many dims as input_shape {}, got {}", op,
             shape_str(input_shape), describe(grad_output));
  check_grad_output(op, grad_output, input_shape, grad_output.size(-2), grad_output.size(-1));
  KILN_CHECK(indices.shape() == grad_output.shape(), ShapeError,
             "{}: expected indices of grad_output's shape {}, got {}", op,
             shape_str(grad_output.shape()), describe(indices));
  const PoolCall call(op, grad_output.device(), grad_output);
  const bool as_bf16 = grad_output.dtype() == DType::bf16 && call.kernels.max_pool_takes_bf16;
  const Tensor g = call.operand(grad_output, as_bf16);
  const Tensor grad_input = call.output(batched(input_shape), g.dtype(), g.device(), !as_bf16);
  call.kernels.max_pool2d_backward(g, call.operand(indices), grad_input);
  return call.result(grad_input, input_shape, grad_output.dtype());
}

Tensor avg_pool2d(const Tensor& x, Pair kernel_size, Pair stride, Pair padding, bool ceil_mode,
                  bool count_include_pad) {
  const char* op = "avg_pool2d";
  profiler::OpScope profile(op, {&x});
  check_pool_input(op, x);
  Pool2dGeometry g = pool_geometry(op, x.shape(), kernel_size, stride, padding, {1, 1}, ceil_mode);
  const PoolCall call(op, x.device(), x);
  const Tensor cx = call.operand(x);
  const Tensor out = call.output(with_plane(cx.shape(), g.out_h, g.out_w), cx.dtype(), x.device());
  call.kernels.avg_pool2d(cx, out, g, count_include_pad);
  Tensor result = call.result(out, with_plane(x.shape(), g.out_h, g.out_w), x.dtype());
  if (should_record({&x})) {
    auto node = std::make_shared<AvgPool2dBackward>();
    node->input_shape = x.shape();
    node->kernel_size = kernel_size;
    node->stride = stride;
    node->padding = padding;
    node->ceil_mode = ceil_mode;
    node->count_include_pad = count_include_pad;
    record(result, node, {&x});
  }
  return result;
}

Tensor avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape, Pair kernel_size,
                           Pair stride, Pair padding, bool ceil_mode, bool count_include_pad) {
  const char* op = "avg_pool2d_backward";
  profiler::OpScope profile(op, {&grad_output});
  require_defined(op, grad_output, "grad_output");
  require_floating(op, grad_output, "grad_output");
  check_input_shape(op, input_shape);
  Pool2dGeometry g =
      pool_geometry(op, input_shape, kernel_size, stride, padding, {1, 1}, ceil_mode);
  check_grad_output(op, grad_output, input_shape, g.out_h, g.out_w);
  const PoolCall call(op, grad_output.device(), grad_output);
  const Tensor go = call.operand(grad_output);
  const Tensor grad_input = call.output(batched(input_shape), go.dtype(), go.device(), true);
  call.kernels.avg_pool2d_backward(go, grad_input, g, count_include_pad);
  return call.result(grad_input, input_shape, grad_output.dtype());
}

Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size) {
  const char* op = "adaptive_avg_pool2d";
  profiler::OpScope profile(op, {&x});
  check_pool_input(op, x);
  KILN_CHECK(output_size[0] >= 0 && output_size[1] >= 0, ValueError,
             "{}: output_size must be non-negative, got ({}, {})", op, output_size[0],
             output_size[1]);
  const PoolCall call(op, x.device(), x);
  const Tensor cx = call.operand(x);
  const Tensor out =
      call.output(with_plane(cx.shape(), output_size[0], output_size[1]), cx.dtype(), x.device());
  call.kernels.adaptive_avg_pool2d(cx, out);
  Tensor result =
      call.result(out, with_plane(x.shape(), output_size[0], output_size[1]), x.dtype());
  if (should_record({&x})) {
    auto node = std::make_shared<AdaptiveAvgPool2dBackward>();
    node->input_shape = x.shape();
    record(result, node, {&x});
  }
  return result;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape) {
  const char* op = "adaptive_avg_pool2d_backward";
  profiler::OpScope profile(op, {&grad_output});
  require_defined(op, grad_output, "grad_output");
  require_floating(op, grad_output, "grad_output");
  check_input_shape(op, input_shape);
  KILN_CHECK(grad_output.dim() == static_cast<int64_t>(input_shape.size()), ShapeError,
             "{}: expected grad_output with as many dims as input_shape {}, got {}", op,
             shape_str(input_shape), describe(grad_output));
  check_grad_output(op, grad_output, input_shape, grad_output.size(-2), grad_output.size(-1));
  const PoolCall call(op, grad_output.device(), grad_output);
  const Tensor go = call.operand(grad_output);
  const Tensor grad_input = call.output(batched(input_shape), go.dtype(), go.device(), true);
  call.kernels.adaptive_avg_pool2d_backward(go, grad_input);
  return call.result(grad_input, input_shape, grad_output.dtype());
}

}  // namespace kiln
