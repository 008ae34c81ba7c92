// Losses: nll_loss with its own forward and backward kernels, cross_entropy composed from
// log_softmax and nll_loss on the CPU (so its gradient comes from theirs) and fused on the GPU,
// and mse_loss from elementwise ops.

#include "kiln/kernels/loss.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/profiler.h"
#include "kiln/kernels/cross_entropy.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/softmax.h"

namespace kiln {

namespace {

// nll_loss's arguments once checked, laid out as the kernels want them.
struct NllArgs {
  Tensor target;        // i64, contiguous [N, S]
  Tensor weight;        // contiguous [C] in the input's dtype, or undefined
  Shape input_3d;       // [N, C, S]
  Shape loss_shape;     // the target's shape: the loss's shape under Reduction::none
  double total_weight;  // sum of w[target] over the targets not ignored: the mean's denominator
  // The same on a GPU, as a 0-dim f64 tensor there (kernels/loss.h): what the fused path divides
  // by, so that a CUDA graph holds the division rather than this capture's value.
  Tensor total_weight_tensor;
};

// `input` is log_probs for nll_loss and logits for cross_entropy: both [C], [N, C] or [N, C, d...].
NllArgs check_nll_args(const char* op, const Tensor& input, const Tensor& target,
                       const Tensor& weight, int64_t ignore_index) {
  require_defined(op, input);
  require_defined(op, target, "target");
  require_floating(op, input);
  require_index_dtype(op, target, "target");
  const Device device = common_device(op, {&input, &target, &weight});
  KILN_CHECK(input.dim() >= 1, ShapeError,
             "{}: expected an input of shape [C], [N, C] or [N, C, d...], got {}", op,
             describe(input));
  const bool unbatched = input.dim() == 1;
  const int64_t class_dim = unbatched ? 0 : 1;
  Shape expected = input.shape();
  expected.erase(expected.begin() + class_dim);
  KILN_CHECK(target.shape() == expected, ShapeError,
             "{}: input {} needs a target of shape {} (the input's shape without the class dim), "
             "got target {}",
             op, shape_str(input.shape()), shape_str(expected), shape_str(target.shape()));

  NllArgs a;
  const int64_t classes = input.shape()[class_dim];
  if (weight.defined()) {
    require_floating(op, weight, "weight");
    KILN_CHECK(weight.shape() == Shape{classes}, ShapeError,
               "{}: expected a weight of shape [{}] (one per class of input {}), got {}", op,
               classes, shape_str(input.shape()), describe(weight));
    a.weight = weight.detach().to(input.dtype()).contiguous();
  }
  const int64_t batch = unbatched ? 1 : input.shape()[0];
  int64_t inner = 1;
  for (int64_t d = 2; d < input.dim(); ++d) inner *= input.shape()[d];
  a.input_3d = {batch, classes, inner};
  a.loss_shape = expected;
  a.target = target.detach().to(DType::i64).contiguous().reshape({batch, inner});

  const NllTargetScan scan = kernels_for<LossKernels>(op, device)
                                 .scan_nll_targets(a.target, a.weight, classes, ignore_index);
  if (scan.bad_position >= 0) {
    const int64_t bad = a.target.cpu().data<int64_t>()[scan.bad_position];
    throw IndexError(fmt::format(
        "{}: target {} (at flat position {}) is out of range for {} classes; expected 0 to {} or "
        "ignore_index {}",
        op, bad, scan.bad_position, classes, classes - 1, ignore_index));
  }
  a.total_weight = scan.total_weight;
  a.total_weight_tensor = scan.total_weight_tensor;
  return a;
}

// d loss / d log_probs is -w[t] / denominator at each target entry and 0 elsewhere: constant in
// log_probs, so the node keeps only the targets and weights.
struct NllLossBackward : Node {
  SavedTensor target, weight;
  Shape input_shape, input_3d;
  DType dtype = DType::f32;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
  double total_weight = 0.0;
  std::string name() const override { return "NllLossBackward"; }
  bool differentiable_backward() const override { return true; }
  std::vector<Tensor> apply(const Tensor& g) override {
    const Shape per_target_shape{input_3d[0], input_3d[2]};
    Tensor per_target = g.to(dtype);
    if (reduction == Reduction::mean) per_target = div(per_target, total_weight);
    if (reduction == Reduction::none) {
      per_target = per_target.reshape(per_target_shape).contiguous();
    } else {
      per_target = per_target.reshape({1, 1}).expand(per_target_shape).contiguous();
    }
    Tensor grad_input = zeros(input_3d, dtype, g.device());
    const Tensor t = target.unpack(*this), w = weight.unpack(*this);
    kernels_for<LossKernels>("nll_loss_backward", grad_input.device())
        .nll_loss_backward(per_target, t, w, ignore_index, grad_input);
    Tensor out = grad_input.reshape(input_shape);
    // Linear in g alone: its transpose is nll_loss itself, on the incoming gradient.
    record_adjoint(out, g, "NllLossBackwardBackward",
                   [t, w, ignore = ignore_index, r = reduction, shape = input_3d,
                    g_shape = g.shape()](const Tensor& G) {
                     return nll_loss(G.reshape(shape), t, w, ignore, r).reshape(g_shape);
                   });
    return {out};
  }
  void release_saved() override { target.reset(), weight.reset(); }
};

Tensor nll_loss_checked(const Tensor& log_probs, const NllArgs& a, int64_t ignore_index,
                        Reduction reduction) {
  Tensor lp = log_probs.detach().contiguous().reshape(a.input_3d);
  Tensor out;
  if (reduction == Reduction::none) {
    out = empty(a.loss_shape, log_probs.dtype(), log_probs.device());
    const Tensor losses = out.reshape({a.input_3d[0], a.input_3d[2]});
    kernels_for<LossKernels>("nll_loss_forward", lp.device())
        .nll_loss_forward(lp, a.target, a.weight, ignore_index, losses);
  } else {
    const double total = kernels_for<LossKernels>("nll_loss_forward", lp.device())
                             .nll_loss_forward(lp, a.target, a.weight, ignore_index, Tensor());
    // As PyTorch: a mean over no (or zero-weight) targets is 0 / 0 = nan.
    double value = reduction == Reduction::mean ? total / a.total_weight : total;
    out = scalar_tensor(value, log_probs.dtype(), log_probs.device());
  }
  if (should_record({&log_probs})) {
    auto node = std::make_shared<NllLossBackward>();
    node->target = SavedTensor(a.target);
    if (a.weight.defined()) node->weight = SavedTensor(a.weight);
    node->input_shape = log_probs.shape();
    node->input_3d = a.input_3d;
    node->dtype = log_probs.dtype();
    node->ignore_index = ignore_index;
    node->reduction = reduction;
    node->total_weight = a.total_weight;
    record(out, node, {&log_probs});
  }
  return out;
}

void check_reduction(const char* op, Reduction reduction) {
  KILN_CHECK(
      reduction == Reduction::none || reduction == Reduction::mean || reduction == Reduction::sum,
      ValueError, "{}: unknown reduction {}; expected none, mean or sum", op,
      static_cast<int>(reduction));
}

// The fused GPU cross_entropy's gradient: one kernel recomputes softmax from the saved logits
// and per-row logsumexp.
struct CrossEntropyBackward : Node {
  // logits as [N, C, S]; lse [N * S]; the mean's total weight (0-dim f64)
  SavedTensor logits, target, weight, lse, total_weight;
  Shape input_shape;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;
  std::string name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor x = logits.unpack(*this), w = weight.unpack(*this), l = lse.unpack(*this);
    const Tensor per_row = g.to(l.dtype()).contiguous();
    Tensor weight_sum, denominator;
    if (w.defined() && label_smoothing != 0.0) weight_sum = sum(w.to(l.dtype()));
    if (reduction == Reduction::mean) denominator = total_weight.unpack(*this).to(l.dtype());
    Tensor grad = empty(x.shape(), x.dtype(), x.device());
    kernels_for<CrossEntropyKernels>("cross_entropy", x.device())
        .backward(per_row, reduction == Reduction::none, x, target.unpack(*this), w, weight_sum, l,
                  ignore_index, label_smoothing, denominator, grad);
    return {grad.reshape(input_shape)};
  }
  void release_saved() override {
    logits.reset(), target.reset(), weight.reset(), lse.reset(), total_weight.reset();
  }
};

// cross_entropy where the device has fused kernels (the GPU): one kernel for the per-row losses
// and logsumexp. Under mean and sum the per-row losses are kept in f64 and summed by kiln's
// (deterministic) sum on the device.
Tensor cross_entropy_fused(const CrossEntropyKernels& fused, const Tensor& logits, const NllArgs& a,
                           int64_t ignore_index, Reduction reduction, double label_smoothing) {
  const Tensor x = logits.detach().contiguous().reshape(a.input_3d);
  const int64_t rows = a.input_3d[0] * a.input_3d[2];
  const DType acc = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor lse = empty({rows}, acc, logits.device());
  Tensor out;
  if (reduction == Reduction::none) {
    out = empty(a.loss_shape, logits.dtype(), logits.device());
    fused.forward(x, a.target, a.weight, ignore_index, label_smoothing, lse, out.reshape({rows}));
  } else {
    const Tensor losses = empty({rows}, DType::f64, logits.device());
    fused.forward(x, a.target, a.weight, ignore_index, label_smoothing, lse, losses);
    Tensor total = sum(losses);
    // As PyTorch: a mean over no (or zero-weight) targets is 0 / 0 = nan.
    if (reduction == Reduction::mean) total = div(total, a.total_weight_tensor);
    out = total.to(logits.dtype());
  }
  if (should_record({&logits})) {
    auto node = std::make_shared<CrossEntropyBackward>();
    node->logits = SavedTensor(x);
    node->target = SavedTensor(a.target);
    if (a.weight.defined()) node->weight = SavedTensor(a.weight);
    node->lse = SavedTensor(lse);
    node->input_shape = logits.shape();
    node->ignore_index = ignore_index;
    node->reduction = reduction;
    node->total_weight = SavedTensor(a.total_weight_tensor);
    node->label_smoothing = label_smoothing;
    record(out, node, {&logits});
  }
  return out;
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                int64_t ignore_index, Reduction reduction) {
  if (AutocastArgs cast{"nll_loss", {&log_probs, &target, &weight}})
    return nll_loss(cast[0], cast[1], cast[2], ignore_index, reduction);
  profiler::OpScope profile("nll_loss", {&log_probs, &target, &weight});
  check_reduction("nll_loss", reduction);
  NllArgs a = check_nll_args("nll_loss", log_probs, target, weight, ignore_index);
  return nll_loss_checked(log_probs, a, ignore_index, reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                     int64_t ignore_index, Reduction reduction, double label_smoothing) {
  if (AutocastArgs cast{"cross_entropy", {&logits, &target, &weight}})
    return cross_entropy(cast[0], cast[1], cast[2], ignore_index, reduction, label_smoothing);
  profiler::OpScope profile("cross_entropy", {&logits, &target, &weight});
  const char* op = "cross_entropy";
  check_reduction(op, reduction);
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError,
             "{}: label_smoothing must be in [0, 1], got {}", op, label_smoothing);
  NllArgs a = check_nll_args(op, logits, target, weight, ignore_index);
  const auto fused = kernels_for<CrossEntropyKernels>(op, logits.device());
  if (fused.forward != nullptr)
    return cross_entropy_fused(fused, logits, a, ignore_index, reduction, label_smoothing);
  // Elsewhere (the CPU), composed from log_softmax and nll_loss, whose gradients it then takes.
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1;
  Tensor log_probs = log_softmax(logits, class_dim);
  Tensor nll = nll_loss_checked(log_probs, a, ignore_index, reduction);
  if (label_smoothing == 0.0) return nll;

  // The smoothed target puts eps / C on every class: its loss is -sum_c w_c log p_c / C per
  // sample, with ignored samples left out and the same denominator as the nll term under mean.
  Tensor weighted = log_probs;
  if (a.weight.defined()) {
    Shape weight_shape(logits.dim(), 1);
    weight_shape[class_dim] = a.input_3d[1];
    weighted = mul(log_probs, a.weight.view(weight_shape));
  }
  Tensor smooth = neg(sum(weighted, {class_dim}));
  smooth = masked_fill(smooth,
                       eq(a.target.reshape(a.loss_shape), static_cast<double>(ignore_index)), 0.0);
  if (reduction == Reduction::sum) smooth = sum(smooth);
  if (reduction == Reduction::mean) smooth = div(sum(smooth), a.total_weight);
  const double classes = static_cast<double>(a.input_3d[1]);
  return add(mul(nll, 1.0 - label_smoothing), mul(smooth, label_smoothing / classes));
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (AutocastArgs cast{"mse_loss", {&input, &target}})
    return mse_loss(cast[0], cast[1], reduction);
  profiler::OpScope profile("mse_loss", {&input, &target});
  const char* op = "mse_loss";
  check_reduction(op, reduction);
  require_defined(op, input);
  require_defined(op, target, "target");
  require_floating(op, input);
  require_floating(op, target, "target");
  // PyTorch only warns here, but a silently broadcast target is almost always a bug ([N] vs [N,
  // 1]).
  KILN_CHECK(input.shape() == target.shape(), ShapeError,
             "{}: input {} and target {} must have the same shape (mse_loss does not broadcast)",
             op, describe(input), describe(target));
  Tensor squared = square(sub(input, target));
  if (reduction == Reduction::sum) return sum(squared);
  if (reduction == Reduction::mean) return mean(squared);
  return squared;
}

}  // namespace kiln
