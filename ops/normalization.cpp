// batch_norm and layer_norm: checks, the statistics and normalising kernels, and each op's
// backward in closed form (PyTorch's formulas) next to its forward: batch norm's as one fused
// kernel (it runs after every convolution of a ResNet), layer norm's written with kiln ops.
// batch_norm_relu folds the ReLU that follows most batch norms into both passes on the CPU.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/profiler.h"
#include "kiln/kernels/normalization.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/normalization.h"
#include "kiln/ops/reduce.h"

namespace kiln {

namespace {

// The kernels compute in f32 or f64; the 16-bit floats go through f32.
DType compute_dtype(DType dtype) {
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}

Tensor kernel_operand(const Tensor& t, DType compute) {
  return t.defined() ? t.detach().to(compute).contiguous() : Tensor();
}

// The dtype batch norm's kernels read x and the gradient in and write their results in: x's own
// where the device's kernels take 16-bit activations (statistics and parameters stay in
// `compute`), `compute` elsewhere.
DType activation_dtype(DType x, DType compute, Device device) {
  return kernels_for<NormalizationKernels>("batch_norm", device).takes_half ? x : compute;
}

void check_affine(const char* op, const Tensor& t, const Shape& expected, const char* argument) {
  if (!t.defined()) return;
  require_floating(op, t, argument);
  KILN_CHECK(t.shape() == expected, ShapeError, "{}: expected {} of shape {}, got {}", op, argument,
             shape_str(expected), describe(t));
}

// Gradients shared by both normalisations: x_hat = (x - mean) * invstd, and the gradient of the
// affine part that follows it.
struct NormBackward : Node {
  SavedTensor input, weight, mean, invstd;
  DType weight_dtype = DType::f32, bias_dtype = DType::f32;
  void release_saved() override { input.reset(), weight.reset(), mean.reset(), invstd.reset(); }
  bool wants(size_t i) const { return i < next_edges.size() && next_edges[i].valid(); }
};

struct BatchNormBackward : NormBackward {
  bool training = true;
  bool relu = false;  // the backward of batch_norm_relu: the bias decides where the ReLU passed
  SavedTensor bias;
  std::string name() const override {
    return relu ? "BatchNormReluBackward" : "BatchNormBackward";
  }
  void release_saved() override {
    NormBackward::release_saved();
    bias.reset();
  }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor x = input.unpack(*this), w = weight.unpack(*this);
    Tensor mu = mean.unpack(*this), rstd = invstd.unpack(*this);
    const int64_t channels = x.size(1);
    const DType compute = mu.dtype();
    const DType io = activation_dtype(x.dtype(), compute, x.device());
    const int64_t spatial = shape_numel(Shape(x.shape().begin() + 2, x.shape().end()));
    const Shape flat{x.size(0), channels, spatial};
    Tensor cx = kernel_operand(x, io).view(flat);
    Tensor cg = kernel_operand(g, io).view(flat);
    Tensor grad_x = wants(0) ? empty(flat, io, x.device()) : Tensor();
    Tensor sum_g = empty({channels}, compute, x.device());
    Tensor sum_g_x_hat = empty({channels}, compute, x.device());
    // relu is only ever set where the device's kernels fuse it (see batch_norm_relu).
    kernels_for<NormalizationKernels>("batch_norm_backward", x.device())
        .batch_norm_backward(cx, cg, mu, rstd, kernel_operand(w, compute), training, grad_x, sum_g,
                             sum_g_x_hat, relu,
                             relu ? kernel_operand(bias.unpack(*this), compute) : Tensor(),
                             x.dtype());
    return {wants(0) ? grad_x.view(x.shape()).to(x.dtype()) : Tensor(),
            wants(1) ? sum_g_x_hat.to(weight_dtype) : Tensor(),
            wants(2) ? sum_g.to(bias_dtype) : Tensor()};
  }
};

struct LayerNormBackward : NormBackward {
  int64_t normalized_dims = 1;
  std::string name() const override { return "LayerNormBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor x = input.unpack(*this), w = weight.unpack(*this);
    const int64_t lead = x.dim() - normalized_dims;
    Shape stat_shape(x.shape().begin(), x.shape().begin() + lead);
    Shape normalized_shape(x.shape().begin() + lead, x.shape().end());
    stat_shape.resize(x.dim(), 1);
    Dims normalized;
    for (int64_t d = lead; d < x.dim(); ++d) normalized.push_back(d);
    const double count = static_cast<double>(shape_numel(normalized_shape));

    Tensor rstd = invstd.unpack(*this).view(stat_shape);
    Tensor x_hat = mul(sub(x, mean.unpack(*this).view(stat_shape)), rstd);
    Tensor grad_x;
    if (wants(0)) {
      // PyTorch's formula with g * w in place of g: each row's mean and variance depend on the
      // whole row, so its gradient loses its projection on 1 and on x_hat.
      Tensor gw = w.defined() ? mul(g, w) : g;
      Tensor centred = sub(sub(mul(gw, count), sum(gw, normalized, true)),
                           mul(x_hat, sum(mul(gw, x_hat), normalized, true)));
      grad_x = mul(centred, div(rstd, count)).to(x.dtype());
    }
    Tensor grad_w = wants(1) ? sum_to(mul(g, x_hat), normalized_shape).to(weight_dtype) : Tensor();
    Tensor grad_b = wants(2) ? sum_to(g, normalized_shape).to(bias_dtype) : Tensor();
    return {grad_x, grad_w, grad_b};
  }
};

void remember_affine(NormBackward& node, const Tensor& weight, const Tensor& bias) {
  node.weight = SavedTensor(weight);
  if (weight.defined()) node.weight_dtype = weight.dtype();
  if (bias.defined()) node.bias_dtype = bias.dtype();
}

// running = (1 - momentum) * running + momentum * batch, outside autograd.
void update_running(Tensor running, const Tensor& batch, double momentum) {
  NoGradGuard no_grad;
  running.mul_(1.0 - momentum);
  running.add_(batch.to(running.dtype()), momentum);
}

}  // namespace

namespace {

// batch_norm, and with relu the fused batch_norm_relu of the devices whose kernels fuse it.
Tensor batch_norm_impl(const char* op, const Tensor& x, const Tensor& running_mean,
                       const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                       bool training, double momentum, double eps, bool relu) {
  profiler::OpScope profile(op, {&x, &weight, &bias});
  require_defined(op, x);
  require_floating(op, x);
  KILN_CHECK(x.dim() >= 2, ShapeError, "{}: expected an input of shape [N, C, ...], got {}", op,
             describe(x));
  const int64_t channels = x.size(1);
  check_affine(op, weight, {channels}, "weight");
  check_affine(op, bias, {channels}, "bias");
  check_affine(op, running_mean, {channels}, "running_mean");
  check_affine(op, running_var, {channels}, "running_var");
  KILN_CHECK(running_mean.defined() == running_var.defined(), ValueError,
             "{}: running_mean and running_var must be given together, got {} and {}", op,
             describe(running_mean), describe(running_var));
  KILN_CHECK(training || running_mean.defined(), ValueError,
             "{}: inference (training = false) needs running_mean and running_var", op);
  KILN_CHECK(eps >= 0.0, ValueError, "{}: eps must be non-negative, got {}", op, eps);
  Device device = common_device(op, {&x, &running_mean, &running_var, &weight, &bias});

  const int64_t count = channels > 0 ? x.numel() / channels : 0;  // values per channel
  KILN_CHECK(!training || count != 1, ValueError,
             "{}: expected more than 1 value per channel when training, got input {}", op,
             describe(x));
  const DType compute = compute_dtype(x.dtype());
  const DType io = activation_dtype(x.dtype(), compute, device);
  const int64_t spatial = shape_numel(Shape(x.shape().begin() + 2, x.shape().end()));
  Tensor cx = kernel_operand(x, io).view({x.size(0), channels, spatial});
  Tensor mean, invstd;
  if (training) {
    mean = empty({channels}, compute, device);
    Tensor var = empty({channels}, compute, device);
    kernels_for<NormalizationKernels>("batch_norm_stats", device).batch_norm_stats(cx, mean, var);
    NoGradGuard no_grad;
    invstd = rsqrt(add(var, eps));
    // An empty batch carries no statistics, so the running ones stay as they were.
    if (running_mean.defined() && count > 0) {
      update_running(running_mean, mean, momentum);
      update_running(running_var, mul(var, static_cast<double>(count) / (count - 1)), momentum);
    }
  } else {
    NoGradGuard no_grad;
    mean = kernel_operand(running_mean, compute);
    invstd = rsqrt(add(kernel_operand(running_var, compute), eps));
  }
  Tensor out = empty(cx.shape(), io, device);
  kernels_for<NormalizationKernels>(op, device)
      .batch_norm_apply(cx, mean, invstd, kernel_operand(weight, compute),
                        kernel_operand(bias, compute), out, relu);
  Tensor result = out.view(x.shape()).to(x.dtype());
  if (should_record({&x, &weight, &bias})) {
    auto node = std::make_shared<BatchNormBackward>();
    node->input = SavedTensor(x);
    node->mean = SavedTensor(mean);
    node->invstd = SavedTensor(invstd);
    node->training = training;
    node->relu = relu;
    if (relu) node->bias = SavedTensor(bias);
    remember_affine(*node, weight, bias);
    record(result, node, {&x, &weight, &bias});
  }
  return result;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  return batch_norm_impl("batch_norm", x, running_mean, running_var, weight, bias, training,
                         momentum, eps, false);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps) {
  // Where the device's kernels do not fold the ReLU into batch norm's passes, it is the two ops.
  if (x.defined() && !kernels_for<NormalizationKernels>("batch_norm_relu", x.device()).fuses_relu)
    return relu(batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps));
  return batch_norm_impl("batch_norm_relu", x, running_mean, running_var, weight, bias, training,
                         momentum, eps, true);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  if (AutocastArgs cast{"layer_norm", {&x, &weight, &bias}})
    return layer_norm(cast[0], normalized_shape, cast[1], cast[2], eps);
  profiler::OpScope profile("layer_norm", {&x, &weight, &bias});
  const char* op = "layer_norm";
  require_defined(op, x);
  require_floating(op, x);
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  KILN_CHECK(nd >= 1, ValueError, "{}: normalized_shape must have at least one dim, got []", op);
  const int64_t lead = x.dim() - nd;
  KILN_CHECK(lead >= 0 && Shape(x.shape().begin() + lead, x.shape().end()) == normalized_shape,
             ShapeError,
             "{}: expected an input whose trailing dims are normalized_shape {}, got {}", op,
             shape_str(normalized_shape), describe(x));
  check_affine(op, weight, normalized_shape, "weight");
  check_affine(op, bias, normalized_shape, "bias");
  KILN_CHECK(eps >= 0.0, ValueError, "{}: eps must be non-negative, got {}", op, eps);
  Device device = common_device(op, {&x, &weight, &bias});

  const int64_t k = shape_numel(normalized_shape);
  const int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().begin() + lead));
  const DType compute = compute_dtype(x.dtype());
  Tensor cx = kernel_operand(x, compute).view({rows, k});
  Tensor out = empty({rows, k}, compute, device);
  Tensor mean = empty({rows}, compute, device);
  Tensor invstd = empty({rows}, compute, device);
  kernels_for<NormalizationKernels>("layer_norm", device).layer_norm(cx, kernel_operand(weight, compute), kernel_operand(bias, compute), eps, out, mean, invstd);
  Tensor result = out.view(x.shape()).to(x.dtype());
  if (should_record({&x, &weight, &bias})) {
    auto node = std::make_shared<LayerNormBackward>();
    node->input = SavedTensor(x);
    node->mean = SavedTensor(mean);
    node->invstd = SavedTensor(invstd);
    node->normalized_dims = nd;
    remember_affine(*node, weight, bias);
    record(result, node, {&x, &weight, &bias});
  }
  return result;
}

}  // namespace kiln
