// SyncBatchNorm: batch norm whose training statistics are the global batch's, over every rank of
// a data-parallel job, as torch.nn.SyncBatchNorm. With small per-rank batches (large images, many
// GPUs) each rank's own statistics are noisy; synced, the job normalises as one process with the
// whole batch would.
//
//   auto model = nn::make_resnet("resnet50", {...});
//   dist::convert_sync_batchnorm(*model);   // every BatchNorm of the model, in place
//   auto ddp = std::make_shared<dist::DistributedDataParallel>(model);
//
// Each training forward of a synced layer runs two all-reduces (per-channel sums and counts, then
// squared deviations from the global mean) and its backward two more (the gradients of those
// sums), on every rank in the same order; evaluation uses the running statistics and talks to no
// one. The running statistics update from the global batch, so every rank keeps the same.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/dist/process_group.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/module.h"

namespace kiln::dist {

// The sum of `x` over every rank of `group`, as an op: its backward is the sum over the ranks of
// the gradients, which is what the gradient of a sum taken on every rank is.
Tensor all_reduce_sum_with_grad(const Tensor& x, ProcessGroup& group);

// Makes every BatchNorm in `module` (itself included) reduce its statistics over `group` (the
// default group when null). Returns how many layers it converted.
int64_t convert_sync_batchnorm(nn::Module& module, std::shared_ptr<ProcessGroup> group = nullptr);

// A BatchNorm2d synced over `group` from the start, for models written with it.
class SyncBatchNorm : public nn::BatchNorm2d {
 public:
  explicit SyncBatchNorm(int64_t num_features, nn::BatchNormOptions options = {},
                         std::shared_ptr<ProcessGroup> group = nullptr);
  std::string name() const override { return "SyncBatchNorm"; }
};

}  // namespace kiln::dist
