// group_norm and instance_norm, composed as PyTorch composes them: group norm is a layer norm over
// each group's channels and positions, then the per-channel affine; instance norm is batch norm of
// the input seen as one sample of N * C channels, with the running statistics repeated per sample
// and averaged back (at::instance_norm).
#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/core/shape.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/checks.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/normalization.h"
#include "kiln/ops/rearrange.h"
#include "kiln/ops/reduce.h"

namespace kiln {

namespace {

// weight or bias [C] shaped to multiply x [N, C, ...]: [C, 1, ...].
Tensor per_channel(const Tensor& t, int64_t x_dims) {
  Shape shape(static_cast<size_t>(x_dims - 1), 1);
  shape[0] = t.numel();
  return t.reshape(shape);
}

void check_channels(const char* op, const Tensor& t, int64_t channels, const char* what) {
  if (!t.defined()) return;
  KILN_CHECK(t.dim() == 1 && t.numel() == channels, ShapeError,
             "{}: expected {} of shape [{}] (one per channel), got {}", op, what, channels,
             describe(t));
}

}  // namespace

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  if (AutocastArgs cast{"group_norm", {&x, &weight, &bias}})
    return group_norm(cast[0], num_groups, cast[1], cast[2], eps);
  const char* op = "group_norm";
  require_defined(op, x);
  KILN_CHECK(x.dim() >= 2, ShapeError, "{}: expected an input [N, C, ...], got {}", op,
             describe(x));
  const int64_t channels = x.size(1);
  KILN_CHECK(num_groups > 0 && channels % num_groups == 0, ValueError,
             "{}: num_groups ({}) must be positive and divide the {} channels", op, num_groups,
             channels);
  check_channels(op, weight, channels, "weight");
  check_channels(op, bias, channels, "bias");
  const int64_t group_size = x.numel() / (x.size(0) * num_groups);
  Tensor y = layer_norm(x.reshape({x.size(0), num_groups, group_size}), {group_size}, Tensor(),
                        Tensor(), eps)
                 .reshape(x.shape());
  if (weight.defined()) y = mul(y, per_channel(weight, x.dim()));
  if (bias.defined()) y = add(y, per_channel(bias, x.dim()));
  return y;
}

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, bool use_input_stats,
                     double momentum, double eps) {
  const char* op = "instance_norm";
  require_defined(op, x);
  KILN_CHECK(x.dim() >= 3, ShapeError, "{}: expected an input [N, C, L] or [N, C, H, W], got {}",
             op, describe(x));
  const int64_t n = x.size(0), channels = x.size(1);
  check_channels(op, weight, channels, "weight");
  check_channels(op, bias, channels, "bias");
  check_channels(op, running_mean, channels, "running_mean");
  check_channels(op, running_var, channels, "running_var");
  KILN_CHECK(use_input_stats || (running_mean.defined() && running_var.defined()), ValueError,
             "{}: without input statistics the running mean and variance are needed", op);
  Shape one_sample = x.shape();
  one_sample[0] = 1;
  one_sample[1] = n * channels;
  auto repeated = [n](const Tensor& t) { return t.defined() ? repeat(t, {n}) : Tensor(); };
  const Tensor mean_n = repeated(running_mean), var_n = repeated(running_var);
  Tensor y = batch_norm(x.contiguous().reshape(one_sample), mean_n, var_n, repeated(weight),
                        repeated(bias), use_input_stats, momentum, eps)
                 .reshape(x.shape());
  if (use_input_stats && running_mean.defined()) {
    NoGradGuard no_grad;
    Tensor(running_mean).copy_(mean(mean_n.view({n, channels}), {0}));  // a handle: writes through
    Tensor(running_var).copy_(mean(var_n.view({n, channels}), {0}));
  }
  return y;
}

}  // namespace kiln
