#include "kiln/nn/group_norm.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/shape.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/normalization.h"

namespace kiln::nn {

namespace {
// Python's spelling, so str() reads as PyTorch's repr.
const char* py_bool(bool b) {
  return b ? "True" : "False";
}
}  // namespace

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options)
    : num_groups_(num_groups), num_channels_(num_channels), options_(options) {
  KILN_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0, ValueError,
             "GroupNorm: num_channels ({}) must be a positive multiple of num_groups ({})",
             num_channels, num_groups);
  if (options.affine) {
    weight = register_parameter("weight", ones({num_channels}));
    bias = register_parameter("bias", zeros({num_channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  KILN_CHECK(x.dim() >= 2 && x.size(1) == num_channels_, ShapeError,
             "GroupNorm: expected an input [N, {}, ...], got shape {}", num_channels_,
             shape_str(x.shape()));
  return group_norm(x, num_groups_, weight, bias, options_.eps);
}

std::string GroupNorm::extra_repr() const {
  return fmt::format("{}, {}, eps={}, affine={}", num_groups_, num_channels_, options_.eps,
                     py_bool(options_.affine));
}

InstanceNorm::InstanceNorm(int64_t num_features, int expected_dims, InstanceNormOptions options)
    : num_features_(num_features), expected_dims_(expected_dims), options_(options) {
  KILN_CHECK(num_features > 0, ValueError, "{}: num_features must be positive, got {}", name(),
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

Tensor InstanceNorm::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == expected_dims_, ShapeError, "{}: expected a {} input, got shape {}", name(),
             expected_dims_ == 4 ? "4-D [N, C, H, W]" : "3-D [N, C, L]", shape_str(x.shape()));
  KILN_CHECK(x.size(1) == num_features_, ShapeError,
             "{}: expected {} channels in dim 1, got shape {}", name(), num_features_,
             shape_str(x.shape()));
  return instance_norm(x, running_mean, running_var, weight, bias,
                       is_training() || !options_.track_running_stats, options_.momentum,
                       options_.eps);
}

std::string InstanceNorm::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features_,
                     options_.eps, options_.momentum, py_bool(options_.affine),
                     py_bool(options_.track_running_stats));
}

}  // namespace kiln::nn
