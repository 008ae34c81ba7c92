#include "kiln/nn/layers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/nn/init.h"
#include "kiln/ops/autograd/checkpoint.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/reduce.h"

namespace kiln::nn {

namespace {
std::string pair_str(Pair p) {
  return fmt::format("({}, {})", p[0], p[1]);
}
// Python's spelling, so str() reads as PyTorch's repr.
const char* py_bool(bool b) {
  return b ? "True" : "False";
}
// A stride of {0, 0} means the kernel size; str() shows the stride in effect.
Pair pool_stride(Pair stride, Pair kernel_size) {
  return stride == Pair{0, 0} ? kernel_size : stride;
}

// PyTorch's default for Linear and Conv: kaiming_uniform_(a=sqrt(5)) on the weight, which is
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias.
void default_init(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}
}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias)
    : in_features_(in_features), out_features_(out_features) {
  KILN_CHECK(in_features > 0 && out_features > 0, ValueError,
             "Linear: in_features and out_features must be positive, got {} and {}", in_features,
             out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", empty({out_features}));
  default_init(weight, bias);
}

Tensor Linear::forward(const Tensor& x) {
  return linear(x, weight, bias);
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features_, out_features_,
                     py_bool(bias.defined()));
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, Conv2dOptions options)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      options_(options) {
  KILN_CHECK(in_channels > 0 && out_channels > 0 && kernel_size[0] > 0 && kernel_size[1] > 0,
             ValueError,
             "Conv2d: channels and kernel size must be positive, got {}, {} and kernel_size={}",
             in_channels, out_channels, pair_str(kernel_size));
  KILN_CHECK(
      options.groups > 0 && in_channels % options.groups == 0 && out_channels % options.groups == 0,
      ValueError, "Conv2d: in_channels {} and out_channels {} must be divisible by groups {}",
      in_channels, out_channels, options.groups);
  weight = register_parameter("weight", empty({out_channels, in_channels / options.groups,
                                               kernel_size[0], kernel_size[1]}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  default_init(weight, bias);
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias, options_.stride, options_.padding, options_.dilation,
                options_.groups);
}

std::string Conv2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels_, out_channels_,
                              pair_str(kernel_size_), pair_str(options_.stride));
  if (options_.padding != Pair{0, 0}) s += ", padding=" + pair_str(options_.padding);
  if (options_.dilation != Pair{1, 1}) s += ", dilation=" + pair_str(options_.dilation);
  if (options_.groups != 1) s += fmt::format(", groups={}", options_.groups);
  if (!options_.bias) s += ", bias=False";
  return s;
}

BatchNorm::BatchNorm(int64_t num_features, int expected_dims, BatchNormOptions options)
    : num_features_(num_features),
      expected_dims_(expected_dims),
      eps_(options.eps),
      momentum_(options.momentum) {
  KILN_CHECK(num_features > 0, ValueError, "BatchNorm: num_features must be positive, got {}",
             num_features);
  if (options.affine) {
    weight = register_parameter("weight", ones({num_features}));
    bias = register_parameter("bias", zeros({num_features}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64));
  }
}

// The global batch's statistics, from sums over the ranks. Each rank may hold a different number
// of examples; the counts are summed with the values. The running statistics take the unbiased
// variance of the global batch, as PyTorch's SyncBatchNorm.
Tensor BatchNorm::run_synced(const Tensor& input, const Epilogue& epilogue) {
  // 16-bit inputs are normalised in f32: a count or a sum of squares overflows their precision.
  const bool narrow = input.dtype() == DType::f16 || input.dtype() == DType::bf16;
  const Tensor x = narrow ? input.to(DType::f32) : input;
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Shape per_channel(x.dim(), 1);
  per_channel[1] = num_features_;
  const double local_count = static_cast<double>(x.numel() / num_features_);
  const Tensor count_of = full({1}, local_count, x.dtype(), x.device());
  const Tensor sums = sum_over_ranks_(cat({sum(x, dims), count_of}, 0));
  const Tensor count = sums.narrow(0, num_features_, 1);
  const Tensor mean = div(sums.narrow(0, 0, num_features_), count);
  const Tensor centered = sub(x, mean.view(per_channel));
  const Tensor var = div(sum_over_ranks_(sum(mul(centered, centered), dims)), count);
  Tensor out = mul(centered, rsqrt(add(var, eps_)).view(per_channel));
  if (weight.defined()) out = add(mul(out, weight.view(per_channel)), bias.view(per_channel));
  if (epilogue.residual.defined()) out = add(out, epilogue.residual);
  if (epilogue.relu) out = kiln::relu(out);
  if (is_training() && running_mean.defined() && !is_recomputing_checkpoint()) {
    NoGradGuard no_grad;
    // var * n / (n - 1), on the device: reading n on the host would stall a GPU every step. With
    // n = 1 the variance is 0 and stays 0.
    const Tensor unbiased = mul(var, div(count, clamp(sub(count, 1.0), 1.0, std::nullopt)));
    running_mean.mul_(1 - momentum_).add_(mean.detach().to(running_mean.dtype()), momentum_);
    running_var.mul_(1 - momentum_).add_(unbiased.detach().to(running_var.dtype()), momentum_);
    num_batches_tracked.add_(1.0);
  }
  return narrow ? out.to(input.dtype()) : out;
}

Tensor BatchNorm::forward(const Tensor& x) {
  return run(x, {});
}

Tensor BatchNorm::forward_relu(const Tensor& x) {
  return run(x, {.relu = true});
}

Tensor BatchNorm::forward_add_relu(const Tensor& x, const Tensor& residual) {
  return run(x, {.relu = true, .residual = residual});
}

Tensor BatchNorm::run(const Tensor& x, const Epilogue& epilogue) {
  bool ok_dims = expected_dims_ == 4 ? x.dim() == 4 : (x.dim() == 2 || x.dim() == 3);
  KILN_CHECK(ok_dims, ShapeError, "{}: expected a {} input, got shape {}", name(),
             expected_dims_ == 4 ? "4-D [N, C, H, W]" : "2-D [N, C] or 3-D [N, C, L]",
             shape_str(x.shape()));
  KILN_CHECK(x.shape()[1] == num_features_, ShapeError,
             "{}: expected {} channels in dim 1, got shape {}", name(), num_features_,
             shape_str(x.shape()));
  // Without running statistics there is nothing else to normalise with, even in eval mode.
  bool use_batch_stats = is_training() || !running_mean.defined();
  if (use_batch_stats && sum_over_ranks_) return run_synced(x, epilogue);
  // A checkpoint's recomputation normalises with the batch's statistics again but leaves the
  // running ones as the forward updated them (ops/autograd/checkpoint.h).
  const bool recomputing = is_training() && is_recomputing_checkpoint();
  const Tensor mean = recomputing ? Tensor() : running_mean;
  const Tensor var = recomputing ? Tensor() : running_var;
  // Counted by the op, after its checks, so a batch that batch_norm rejects is not counted.
  const Tensor count = is_training() && !recomputing ? num_batches_tracked : Tensor();
  if (epilogue.residual.defined())
    return batch_norm_add_relu(x, epilogue.residual, mean, var, weight, bias, use_batch_stats,
                               momentum_, eps_, count);
  if (epilogue.relu)
    return batch_norm_relu(x, mean, var, weight, bias, use_batch_stats, momentum_, eps_, count);
  return batch_norm(x, mean, var, weight, bias, use_batch_stats, momentum_, eps_, count);
}

std::string BatchNorm::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features_,
                     eps_, momentum_, py_bool(weight.defined()), py_bool(running_mean.defined()));
}

LayerNorm::LayerNorm(Shape normalized_shape, LayerNormOptions options)
    : normalized_shape_(std::move(normalized_shape)), eps_(options.eps) {
  if (options.elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape_));
    bias = register_parameter("bias", zeros(normalized_shape_));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, normalized_shape_, weight, bias, eps_);
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", shape_str(normalized_shape_), eps_,
                     py_bool(weight.defined()));
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim), padding_idx_(padding_idx) {
  KILN_CHECK(num_embeddings > 0 && embedding_dim > 0, ValueError,
             "Embedding: num_embeddings and embedding_dim must be positive, got {} and {}",
             num_embeddings, embedding_dim);
  KILN_CHECK(padding_idx >= -1 && padding_idx < num_embeddings, ValueError,
             "Embedding: padding_idx must be in [0, {}) or -1 for none, got {}", num_embeddings,
             padding_idx);
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight, 0.0, 1.0);
  if (padding_idx >= 0) {
    NoGradGuard no_grad;
    weight.select(0, padding_idx).fill_(0.0);
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  return embedding(weight, indices, padding_idx_);
}

std::string Embedding::extra_repr() const {
  std::string s = fmt::format("{}, {}", num_embeddings_, embedding_dim_);
  if (padding_idx_ >= 0) s += fmt::format(", padding_idx={}", padding_idx_);
  return s;
}

Dropout::Dropout(double p) : p_(p) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, ValueError, "Dropout: p must be in [0, 1], got {}", p);
}
std::string Dropout::extra_repr() const {
  return fmt::format("p={}", p_);
}

std::string MaxPool2d::extra_repr() const {
  std::string s =
      fmt::format("kernel_size={}, stride={}, padding={}", pair_str(kernel_size_),
                  pair_str(pool_stride(options_.stride, kernel_size_)), pair_str(options_.padding));
  if (options_.dilation != Pair{1, 1}) s += ", dilation=" + pair_str(options_.dilation);
  if (options_.ceil_mode) s += ", ceil_mode=True";
  return s;
}
std::string AvgPool2d::extra_repr() const {
  std::string s =
      fmt::format("kernel_size={}, stride={}, padding={}", pair_str(kernel_size_),
                  pair_str(pool_stride(options_.stride, kernel_size_)), pair_str(options_.padding));
  if (options_.ceil_mode) s += ", ceil_mode=True";
  if (!options_.count_include_pad) s += ", count_include_pad=False";
  return s;
}
std::string AdaptiveAvgPool2d::extra_repr() const {
  return fmt::format("output_size={}", pair_str(output_size_));
}

std::string AdaptiveMaxPool2d::extra_repr() const {
  return fmt::format("output_size={}", pair_str(output_size_));
}

Tensor ReLU::forward(const Tensor& x) {
  return relu(x);
}
Tensor GELU::forward(const Tensor& x) {
  return gelu(x, approximate_);
}
Tensor SiLU::forward(const Tensor& x) {
  return silu(x);
}
Tensor Sigmoid::forward(const Tensor& x) {
  return sigmoid(x);
}
Tensor Tanh::forward(const Tensor& x) {
  return tanh(x);
}

}  // namespace kiln::nn
