#include "kiln/dist/tensor_parallel.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/autograd/node.h"
#include "kiln/core/error.h"
#include "kiln/nn/layers.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linalg.h"

namespace kiln::dist {

namespace {

std::shared_ptr<ProcessGroup> or_default(std::shared_ptr<ProcessGroup> group) {
  return group ? std::move(group) : default_group_ptr();
}

// This rank's slice of the last dim of x, which must divide by the group's size.
Tensor own_slice(const Tensor& x, const ProcessGroup& group, const char* op) {
  KILN_CHECK(x.dim() >= 1 && x.size(-1) % group.size() == 0, ShapeError,
             "{}: the last dim of {} must divide by the group's {} ranks", op, describe(x),
             group.size());
  const int64_t part = x.size(-1) / group.size();
  return x.narrow(x.dim() - 1, group.rank() * part, part).contiguous();
}

// The ranks' x joined along the last dim, in rank order.
Tensor gather_last_dim(const Tensor& x, ProcessGroup& group) {
  const Tensor input = x.contiguous();
  std::vector<Tensor> parts;
  for (int r = 0; r < group.size(); ++r) parts.push_back(empty(x.shape(), x.dtype(), x.device()));
  group.all_gather(parts, input);
  return cat(parts, x.dim() - 1);
}

class CopyToRegionBackward : public Node {
 public:
  explicit CopyToRegionBackward(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {}
  std::string name() const override { return "CopyToTensorParallelRegionBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override {
    Tensor sum = grad.contiguous().clone();
    group_->all_reduce(sum, ReduceOp::sum);
    return {sum};
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
};

class ReduceFromRegionBackward : public Node {
 public:
  std::string name() const override { return "ReduceFromTensorParallelRegionBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override { return {grad}; }
};

class GatherFromRegionBackward : public Node {
 public:
  explicit GatherFromRegionBackward(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)) {}
  std::string name() const override { return "GatherFromTensorParallelRegionBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override {
    return {own_slice(grad, *group_, "gather_from_tensor_parallel_region (backward)")};
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
};

class ScatterToRegionBackward : public Node {
 public:
  explicit ScatterToRegionBackward(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)) {}
  std::string name() const override { return "ScatterToTensorParallelRegionBackward"; }
  std::vector<Tensor> apply(const Tensor& grad) override {
    return {gather_last_dim(grad, *group_)};
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
};

}  // namespace

Tensor copy_to_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group) {
  group = or_default(std::move(group));
  Tensor out = x.detach();
  if (should_record({&x})) record(out, std::make_shared<CopyToRegionBackward>(group), {&x});
  return out;
}

Tensor reduce_from_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group) {
  group = or_default(std::move(group));
  Tensor out = x.detach().contiguous().clone();
  group->all_reduce(out, ReduceOp::sum);
  if (should_record({&x})) record(out, std::make_shared<ReduceFromRegionBackward>(), {&x});
  return out;
}

Tensor gather_from_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group) {
  group = or_default(std::move(group));
  Tensor out;
  {
    NoGradGuard no_grad;
    out = gather_last_dim(x.detach(), *group);
  }
  if (should_record({&x})) record(out, std::make_shared<GatherFromRegionBackward>(group), {&x});
  return out;
}

Tensor scatter_to_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group) {
  group = or_default(std::move(group));
  Tensor out = own_slice(x.detach(), *group, "scatter_to_tensor_parallel_region").clone();
  if (should_record({&x})) record(out, std::make_shared<ScatterToRegionBackward>(group), {&x});
  return out;
}

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features,
                                           std::shared_ptr<ProcessGroup> group,
                                           ColumnParallelLinearOptions options)
    : group_(or_default(std::move(group))),
      in_features_(in_features),
      out_features_(out_features),
      options_(options) {
  const int ranks = group_->size();
  KILN_CHECK(out_features % ranks == 0, ValueError,
             "ColumnParallelLinear: out_features ({}) must divide by the group's {} ranks",
             out_features, ranks);
  // The whole layer, initialised as nn::Linear is (alike on every rank), of which this rank keeps
  // its rows.
  nn::Linear whole(in_features, out_features, options.bias);
  const int64_t part = out_features / ranks, first = group_->rank() * part;
  NoGradGuard no_grad;
  weight = register_parameter("weight", whole.weight.narrow(0, first, part).clone());
  if (options.bias) bias = register_parameter("bias", whole.bias.narrow(0, first, part).clone());
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  const Tensor y = linear(copy_to_tensor_parallel_region(x, group_), weight, bias);
  return options_.gather_output ? gather_from_tensor_parallel_region(y, group_) : y;
}

std::string ColumnParallelLinear::extra_repr() const {
  return "in_features=" + std::to_string(in_features_) +
         ", out_features=" + std::to_string(out_features_) + " (" +
         std::to_string(out_features_ / group_->size()) +
         " on this rank), bias=" + (bias.defined() ? "True" : "False") +
         ", gather_output=" + (options_.gather_output ? "True" : "False");
}

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features,
                                     std::shared_ptr<ProcessGroup> group,
                                     RowParallelLinearOptions options)
    : group_(or_default(std::move(group))),
      in_features_(in_features),
      out_features_(out_features),
      options_(options) {
  const int ranks = group_->size();
  KILN_CHECK(in_features % ranks == 0, ValueError,
             "RowParallelLinear: in_features ({}) must divide by the group's {} ranks", in_features,
             ranks);
  nn::Linear whole(in_features, out_features, options.bias);
  const int64_t part = in_features / ranks, first = group_->rank() * part;
  NoGradGuard no_grad;
  weight = register_parameter("weight", whole.weight.narrow(1, first, part).contiguous().clone());
  if (options.bias) bias = register_parameter("bias", whole.bias.clone());
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  const Tensor input =
      options_.input_is_parallel ? x : scatter_to_tensor_parallel_region(x, group_);
  KILN_CHECK(input.dim() >= 1 && input.size(-1) == weight.size(1), ShapeError,
             "RowParallelLinear: expected this rank's {} of the {} input features, got {}",
             weight.size(1), in_features_, describe(input));
  // Every rank's partial product, summed; the bias once, after the sum.
  const Tensor y = reduce_from_tensor_parallel_region(linear(input, weight), group_);
  return bias.defined() ? add(y, bias) : y;
}

std::string RowParallelLinear::extra_repr() const {
  return "in_features=" + std::to_string(in_features_) + " (" +
         std::to_string(in_features_ / group_->size()) +
         " on this rank), out_features=" + std::to_string(out_features_) +
         ", bias=" + (bias.defined() ? "True" : "False") +
         ", input_is_parallel=" + (options_.input_is_parallel ? "True" : "False");
}

}  // namespace kiln::dist
