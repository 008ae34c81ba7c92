// batch_norm and layer_norm: checks, the statistics and normalising kernels, and each op's
// backward in closed form (PyTorch's formulas) next to its forward: batch norm's as one fused
// kernel (it runs after every convolution of a ResNet), layer norm's written with kiln ops.
// batch_norm_relu folds the ReLU that follows most batch norms into both passes, and
// batch_norm_add_relu the residual add and ReLU that end a ResNet block into the GPU's.

#include "kiln/kernels/normalization.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/memory_format.h"
#include "kiln/core/profiler.h"
#include "kiln/core/storage.h"
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

// How batch norm's kernels see an activation of x's shape: [N, C, S] (NCHW, and whatever is not
// 4-D), or [N * H * W, C] for a channels-last x on a device whose passes take that layout (the
// GPU's; the CPU's kernels take NCHW, and the op copies to it and back there).
struct BatchNormView {
  BatchNormLayout layout = BatchNormLayout::channels_first;
  MemoryFormat format = MemoryFormat::contiguous;  // x's, which results and gradients keep
  Shape shape;                                     // x's
  Shape flat;

  // t, of x's shape, as the kernels read it, in dtype.
  Tensor operand(const Tensor& t, DType dtype) const {
    if (!t.defined()) return Tensor();
    if (layout == BatchNormLayout::channels_first) return kernel_operand(t, dtype).view(flat);
    return t.detach()
        .to(dtype)
        .contiguous(MemoryFormat::channels_last)
        .permute({0, 2, 3, 1})
        .view(flat);
  }
  // A kernel's output back in x's shape and memory format.
  Tensor unflat(const Tensor& out) const {
    if (layout == BatchNormLayout::channels_last)
      return out.view({shape[0], shape[2], shape[3], shape[1]}).permute({0, 3, 1, 2});
    return out.view(shape).contiguous(format);
  }
};

BatchNormView batch_norm_view(const Tensor& x, bool takes_channels_last) {
  BatchNormView v;
  v.shape = x.shape();
  if (x.dim() == 4) v.format = x.suggest_memory_format();
  const int64_t channels = x.size(1);
  if (takes_channels_last && v.format == MemoryFormat::channels_last) {
    v.layout = BatchNormLayout::channels_last;
    v.flat = {x.size(0) * x.size(2) * x.size(3), channels};
  } else {
    v.flat = {x.size(0), channels, shape_numel(Shape(v.shape.begin() + 2, v.shape.end()))};
  }
  return v;
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
  // Recorded (create_graph), the gradients are composed of differentiable ops (composed() below),
  // so a second backward reaches x, the weight and the bias through them.
  bool differentiable_backward() const override { return true; }
  bool training = true;
  double eps = 1e-5;
  bool relu = false;  // the backward of batch_norm_relu: the bias decides where the ReLU passed
  // The backward of batch_norm_add_relu: a fourth input, and the output, which says where the
  // ReLU passed.
  bool residual = false;  // of x's shape and dtype
  SavedTensor bias, output;
  std::string name() const override {
    if (residual) return "BatchNormAddReluBackward";
    return relu ? "BatchNormReluBackward" : "BatchNormBackward";
  }
  void release_saved() override {
    NormBackward::release_saved();
    bias.reset();
    output.reset();
  }
  // The kernels' formulas written with kiln's ops, per channel (dim 1) over every other dim: in
  // training the statistics again from x (the saved ones carry no history), in inference the
  // saved running ones (constants); the ReLU's mask from the recomputed pre-activation, or from
  // the stored output of batch_norm_add_relu.
  std::vector<Tensor> composed(const Tensor& g) {
    const Tensor x = input.unpack(*this), w = weight.unpack(*this);
    const DType compute = invstd.unpack(*this).dtype();
    Dims dims{0};
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    Shape stat(static_cast<size_t>(x.dim()), 1);
    stat[1] = x.size(1);
    const Tensor cx = x.to(compute);
    Tensor mu, rstd;
    if (training) {
      mu = kiln::mean(cx, dims, true);
      rstd = rsqrt(add(var(cx, dims, 0, true), eps));
    } else {
      mu = mean.unpack(*this).view(stat);
      rstd = invstd.unpack(*this).view(stat);
    }
    const Tensor x_hat = mul(sub(cx, mu), rstd);
    const Tensor wv = w.defined() ? w.to(compute).view(stat) : Tensor();
    Tensor gc = g.to(compute);
    if (residual || relu) {
      Tensor passed;
      if (residual) {
        passed = gt(output.unpack(*this), 0.0);
      } else {
        NoGradGuard no_grad;
        const Tensor b = bias.unpack(*this);
        Tensor pre = wv.defined() ? mul(x_hat, wv) : x_hat;
        if (b.defined()) pre = add(pre, b.to(compute).view(stat));
        passed = gt(pre, 0.0);
      }
      gc = mul(gc, passed.to(compute));
    }
    Tensor grad_x;
    if (wants(0)) {
      const Tensor gw = wv.defined() ? mul(gc, wv) : gc;
      if (training) {
        const double count = static_cast<double>(x.numel() / x.size(1));
        const Tensor centred = sub(sub(mul(gw, count), sum(gw, dims, true)),
                                   mul(x_hat, sum(mul(gw, x_hat), dims, true)));
        grad_x = mul(centred, div(rstd, count));
      } else {
        grad_x = mul(gw, rstd);
      }
      grad_x = grad_x.to(x.dtype());
    }
    return {grad_x, wants(1) ? sum(mul(gc, x_hat), dims).to(weight_dtype) : Tensor(),
            wants(2) ? sum(gc, dims).to(bias_dtype) : Tensor(),
            wants(3) ? gc.to(x.dtype()) : Tensor()};
  }

  std::vector<Tensor> apply(const Tensor& g) override {
    if (GradMode::is_enabled()) return composed(g);
    Tensor x = input.unpack(*this), w = weight.unpack(*this);
    Tensor mu = mean.unpack(*this), rstd = invstd.unpack(*this);
    const int64_t channels = x.size(1);
    const DType compute = mu.dtype();
    const auto kernels = kernels_for<NormalizationKernels>("batch_norm_backward", x.device());
    const DType io = kernels.takes_half ? x.dtype() : compute;
    const BatchNormView view = batch_norm_view(x, kernels.batch_norm_backward_pass != nullptr);
    const Shape& flat = view.flat;
    Tensor cx = view.operand(x, io);
    Tensor cg = view.operand(g, io);
    Tensor grad_x = wants(0) ? empty(flat, io, x.device()) : Tensor();
    Tensor sum_g, sum_g_x_hat, grad_residual;
    if (kernels.batch_norm_backward_pass) {
      BatchNormBackwardPass pass;
      pass.layout = view.layout;
      pass.x = cx, pass.grad = cg, pass.mean = mu, pass.invstd = rstd;
      pass.weight = kernel_operand(w, compute);
      pass.training = training;
      if (residual) {
        pass.output = view.operand(output.unpack(*this), io);
      } else if (relu) {
        pass.relu = true;
        pass.bias = kernel_operand(bias.unpack(*this), compute);
      }
      pass.grad_x = grad_x;
      if (wants(1)) pass.sum_g_xhat = sum_g_x_hat = empty({channels}, compute, x.device());
      if (wants(2)) pass.sum_g = sum_g = empty({channels}, compute, x.device());
      if (wants(3)) pass.grad_residual = grad_residual = empty(flat, io, x.device());
      kernels.batch_norm_backward_pass(pass);
    } else {
      // relu is only ever set where the device's kernels fuse it (see batch_norm_relu).
      sum_g = empty({channels}, compute, x.device());
      sum_g_x_hat = empty({channels}, compute, x.device());
      // batch_norm_add_relu's mask comes from its stored output, batch_norm_relu's from the bias.
      const bool recompute = relu && !residual;
      Tensor out = residual ? view.operand(output.unpack(*this), io) : Tensor();
      if (wants(3)) grad_residual = empty(flat, io, x.device());
      kernels.batch_norm_backward(
          cx, cg, mu, rstd, kernel_operand(w, compute), training, grad_x, sum_g, sum_g_x_hat,
          recompute, recompute ? kernel_operand(bias.unpack(*this), compute) : Tensor(), x.dtype(),
          out, grad_residual);
    }
    return {wants(0) ? view.unflat(grad_x).to(x.dtype()) : Tensor(),
            wants(1) ? sum_g_x_hat.to(weight_dtype) : Tensor(),
            wants(2) ? sum_g.to(bias_dtype) : Tensor(),
            wants(3) ? view.unflat(grad_residual).to(x.dtype()) : Tensor()};
  }
};

struct LayerNormBackward : NormBackward {
  bool differentiable_backward() const override { return true; }
  int64_t normalized_dims = 1;
  double eps = 1e-5;
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

    Tensor rstd, mu;
    if (GradMode::is_enabled()) {
      // Recorded (create_graph): the statistics again, from x, so the second backward reaches x
      // through them too (the kernel's saved ones carry no history).
      Tensor cx = x.to(invstd.unpack(*this).dtype());
      mu = kiln::mean(cx, normalized, true);
      rstd = rsqrt(add(var(cx, normalized, 0, true), eps));
    } else {
      mu = mean.unpack(*this).view(stat_shape);
      rstd = invstd.unpack(*this).view(stat_shape);
    }
    Tensor x_hat = mul(sub(x, mu), rstd);
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

// What batch norm's forward returns and its backward needs: the output, and the statistics it was
// normalised with, in the compute dtype.
struct BatchNormResult {
  Tensor out, mean, invstd;
};

// The CPU's three kernels, with the running statistics and invstd left to kiln ops; residual
// (cx's layout and dtype, with relu) undefined for none.
BatchNormResult batch_norm_kernels(const NormalizationKernels& kernels, const Tensor& cx,
                                   const Tensor& running_mean, const Tensor& running_var,
                                   const Tensor& weight, const Tensor& bias, bool training,
                                   double momentum, double eps, bool relu, const Tensor& residual) {
  const int64_t channels = cx.size(1), count = cx.size(0) * cx.size(2);
  const DType compute = compute_dtype(cx.dtype());
  BatchNormResult r;
  if (training) {
    r.mean = empty({channels}, compute, cx.device());
    Tensor var = empty({channels}, compute, cx.device());
    kernels.batch_norm_stats(cx, r.mean, var);
    NoGradGuard no_grad;
    r.invstd = rsqrt(add(var, eps));
    // An empty batch carries no statistics, so the running ones stay as they were.
    if (running_mean.defined() && count > 0) {
      update_running(running_mean, r.mean, momentum);
      update_running(running_var, mul(var, static_cast<double>(count) / (count - 1)), momentum);
    }
  } else {
    NoGradGuard no_grad;
    r.mean = kernel_operand(running_mean, compute);
    r.invstd = rsqrt(add(kernel_operand(running_var, compute), eps));
  }
  r.out = empty(cx.shape(), cx.dtype(), cx.device());
  kernels.batch_norm_apply(cx, r.mean, r.invstd, kernel_operand(weight, compute),
                           kernel_operand(bias, compute), r.out, relu, residual);
  return r;
}

// What batch_norm_impl does besides normalising: the ReLU, the residual add before it (only where
// the device's kernels fuse the ReLU: the callers run the separate ops elsewhere), and
// nn::BatchNorm's count of batches.
struct BatchNormExtras {
  bool relu = false;
  Tensor residual{};
  Tensor num_batches_tracked{};
};

// The GPU's forward pass: statistics, running statistics, normalisation, epilogue and count in two
// launches. Running statistics in another dtype, or not contiguous, go through copies.
BatchNormResult batch_norm_pass(const NormalizationKernels& kernels, BatchNormLayout layout,
                                const Tensor& cx, const Tensor& running_mean,
                                const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                                bool training, double momentum, double eps,
                                const BatchNormExtras& extras) {
  const int64_t channels = cx.size(1);
  const DType compute = compute_dtype(cx.dtype());
  BatchNormForwardPass pass;
  pass.layout = layout;
  pass.x = cx;
  pass.weight = kernel_operand(weight, compute), pass.bias = kernel_operand(bias, compute);
  pass.running_mean = kernel_operand(running_mean, compute);
  pass.running_var = kernel_operand(running_var, compute);
  pass.residual = extras.residual;
  pass.num_batches_tracked = extras.num_batches_tracked;
  pass.training = training, pass.relu = extras.relu, pass.momentum = momentum, pass.eps = eps;
  pass.out = empty(cx.shape(), cx.dtype(), cx.device());
  pass.mean = empty({channels}, compute, cx.device());
  pass.invstd = empty({channels}, compute, cx.device());
  kernels.batch_norm_forward_pass(pass);
  // The kernels wrote into these in place: their versions say so, as an in-place op's would.
  if (extras.num_batches_tracked.defined()) extras.num_batches_tracked.storage()->bump_version();
  if (training && running_mean.defined() && cx.numel() > 0) {
    NoGradGuard no_grad;
    for (auto [buffer, updated] :
         {std::pair{running_mean, pass.running_mean}, std::pair{running_var, pass.running_var}}) {
      if (updated.data_ptr() != buffer.data_ptr())
        buffer.copy_(updated);
      else
        buffer.storage()->bump_version();
    }
  }
  return {pass.out, pass.mean, pass.invstd};
}

Tensor batch_norm_impl(const char* op, const Tensor& x, const Tensor& running_mean,
                       const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                       bool training, double momentum, double eps, const BatchNormExtras& extras) {
  const Tensor& residual = extras.residual;
  const Tensor& num_batches_tracked = extras.num_batches_tracked;
  profiler::OpScope profile(op, {&x, &weight, &bias, &residual});
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
  KILN_CHECK(!num_batches_tracked.defined() ||
                 (num_batches_tracked.dtype() == DType::i64 && num_batches_tracked.dim() == 0),
             DTypeError, "{}: expected num_batches_tracked to be an i64 scalar, got {}", op,
             describe(num_batches_tracked));
  Device device = common_device(
      op, {&x, &running_mean, &running_var, &weight, &bias, &residual, &num_batches_tracked});

  const int64_t count = channels > 0 ? x.numel() / channels : 0;  // values per channel
  KILN_CHECK(!training || count != 1, ValueError,
             "{}: expected more than 1 value per channel when training, got input {}", op,
             describe(x));
  const auto kernels = kernels_for<NormalizationKernels>(op, device);
  const DType compute = compute_dtype(x.dtype());
  const DType io = kernels.takes_half ? x.dtype() : compute;
  const BatchNormView view = batch_norm_view(x, kernels.batch_norm_forward_pass != nullptr);
  Tensor cx = view.operand(x, io);
  BatchNormResult r;
  if (kernels.batch_norm_forward_pass) {
    BatchNormExtras flat_extras = extras;
    flat_extras.residual = view.operand(residual, io);
    r = batch_norm_pass(kernels, view.layout, cx, running_mean, running_var, weight, bias, training,
                        momentum, eps, flat_extras);
  } else {
    r = batch_norm_kernels(kernels, cx, running_mean, running_var, weight, bias, training, momentum,
                           eps, extras.relu, view.operand(residual, io));
    if (num_batches_tracked.defined()) {
      NoGradGuard no_grad;
      Tensor(num_batches_tracked).add_(1.0);
    }
  }
  Tensor result = view.unflat(r.out).to(x.dtype());
  if (should_record({&x, &weight, &bias, &residual})) {
    auto node = std::make_shared<BatchNormBackward>();
    node->input = SavedTensor(x);
    node->mean = SavedTensor(r.mean);
    node->invstd = SavedTensor(r.invstd);
    node->training = training;
    node->eps = eps;
    node->relu = extras.relu;
    if (residual.defined()) {
      node->residual = true;
      node->output = SavedTensor(result);
    } else if (extras.relu) {
      node->bias = SavedTensor(bias);
    }
    remember_affine(*node, weight, bias);
    record(result, node, {&x, &weight, &bias, &residual});
  }
  return result;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps, const Tensor& num_batches_tracked) {
  return batch_norm_impl("batch_norm", x, running_mean, running_var, weight, bias, training,
                         momentum, eps,
                         {.relu = false, .num_batches_tracked = num_batches_tracked});
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps, const Tensor& num_batches_tracked) {
  // Where the device's kernels do not fold the ReLU into batch norm's passes, it is the two ops.
  if (x.defined() && !kernels_for<NormalizationKernels>("batch_norm_relu", x.device()).fuses_relu)
    return relu(batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps,
                           num_batches_tracked));
  return batch_norm_impl("batch_norm_relu", x, running_mean, running_var, weight, bias, training,
                         momentum, eps, {.relu = true, .num_batches_tracked = num_batches_tracked});
}

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& running_mean,
                           const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                           bool training, double momentum, double eps,
                           const Tensor& num_batches_tracked) {
  const char* op = "batch_norm_add_relu";
  require_defined(op, x);
  require_defined(op, residual);
  KILN_CHECK(residual.shape() == x.shape(), ShapeError,
             "{}: expected a residual of the input's shape {}, got {}", op, shape_str(x.shape()),
             describe(residual));
  if (kernels_for<NormalizationKernels>(op, x.device()).fuses_relu && residual.dtype() == x.dtype())
    return batch_norm_impl(
        op, x, running_mean, running_var, weight, bias, training, momentum, eps,
        {.relu = true, .residual = residual, .num_batches_tracked = num_batches_tracked});
  // The three ops, in the compute dtype and rounded once at the end as the fused pass rounds
  // (the 16-bit floats through f32); a residual of another dtype promotes as add does.
  if (residual.dtype() != x.dtype())
    return relu(add(batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps,
                               num_batches_tracked),
                    residual));
  const DType compute = compute_dtype(x.dtype());
  return relu(add(batch_norm(x.to(compute), running_mean, running_var, weight, bias, training,
                             momentum, eps, num_batches_tracked),
                  residual.to(compute)))
      .to(x.dtype());
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
  kernels_for<NormalizationKernels>("layer_norm", device)
      .layer_norm(cx, kernel_operand(weight, compute), kernel_operand(bias, compute), eps, out,
                  mean, invstd);
  Tensor result = out.view(x.shape()).to(x.dtype());
  if (should_record({&x, &weight, &bias})) {
    auto node = std::make_shared<LayerNormBackward>();
    node->input = SavedTensor(x);
    node->mean = SavedTensor(mean);
    node->invstd = SavedTensor(invstd);
    node->normalized_dims = nd;
    node->eps = eps;
    remember_affine(*node, weight, bias);
    record(result, node, {&x, &weight, &bias});
  }
  return result;
}

}  // namespace kiln
