#include "kiln/dist/sync_batch_norm.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/node.h"
#include "kiln/ops/autograd/record.h"

namespace kiln::dist {

namespace {

class AllReduceSumBackward : public Node {
 public:
  explicit AllReduceSumBackward(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {}
  std::string name() const override { return "AllReduceSumBackward"; }
  std::vector<Tensor> apply(const Tensor& grad_output) override {
    Tensor g = grad_output.contiguous().clone();
    group_->all_reduce(g, ReduceOp::sum);
    return {g};
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
};

Tensor all_reduce_sum_shared(const Tensor& x, const std::shared_ptr<ProcessGroup>& group) {
  Tensor out = x.detach().contiguous().clone();
  group->all_reduce(out, ReduceOp::sum);
  if (should_record({&x})) record(out, std::make_shared<AllReduceSumBackward>(group), {&x});
  return out;
}

// A shared_ptr that does not own `group`, for callers that hold the group themselves.
std::shared_ptr<ProcessGroup> borrowed(ProcessGroup& group) {
  return std::shared_ptr<ProcessGroup>(&group, [](ProcessGroup*) {});
}

}  // namespace

Tensor all_reduce_sum_with_grad(const Tensor& x, ProcessGroup& group) {
  return all_reduce_sum_shared(x, borrowed(group));
}

int64_t convert_sync_batchnorm(nn::Module& module, std::shared_ptr<ProcessGroup> group) {
  if (!group) group = default_group_ptr();
  int64_t converted = 0;
  auto sync = [&](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm*>(&m)) {
      bn->sync_statistics([group](const Tensor& x) { return all_reduce_sum_shared(x, group); });
      ++converted;
    }
  };
  for (auto& [name, m] : module.named_modules()) sync(*m);
  return converted;
}

SyncBatchNorm::SyncBatchNorm(int64_t num_features, nn::BatchNormOptions options,
                             std::shared_ptr<ProcessGroup> group)
    : nn::BatchNorm2d(num_features, options) {
  if (!group) group = default_group_ptr();
  sync_statistics([group](const Tensor& x) { return all_reduce_sum_shared(x, group); });
}

}  // namespace kiln::dist
