// DistributedDataParallel, as PyTorch's: wrap a model, and each rank's backward ends with every
// gradient averaged over the ranks, so each rank's optimizer takes the same step.
//
//   kiln::dist::init_process_group("gloo");
//   auto ddp = std::make_shared<kiln::dist::DistributedDataParallel>(model);
//   Tensor loss = cross_entropy(ddp->forward(x), y);   // x: this rank's part of the batch
//   loss.backward();                                   // gradients averaged over the ranks
//   optimizer.step();
//
// At construction, the ranks check that they hold the same model (parameters and buffers of the
// same count, order, shapes, dtypes and frozenness; a DistError names the first difference), then
// rank 0's parameters and buffers are broadcast to every rank, so all start alike. The parameters
// are packed, in reverse order (the order backward finishes them), into buckets of about
// bucket_cap_mb; a gradient hook copies each finished gradient into its bucket, and a full bucket
// starts its all-reduce at once, on the group's own thread (Gloo) or stream (NCCL), while backward
// goes on computing the earlier layers' gradients. Buckets start in the same order on every rank.
// When backward ends, a callback waits for the reductions, divides by the world size and copies the
// averages back into .grad.
//
// Gradient accumulation: inside `auto guard = ddp->no_sync();` backward only accumulates .grad
// locally; the first backward after the guard ends reduces the accumulated sum.
//
// A parameter that gets no gradient in a backward would leave its bucket waiting forever on the
// other ranks: kiln raises a DistError naming it when backward ends, unless
// find_unused_parameters is set, in which case it counts as a zero gradient.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/dist/process_group.h"
#include "kiln/nn/module.h"

namespace kiln::dist {

struct DDPOptions {
  double bucket_cap_mb = 25.0;
  // Rank 0's buffers (batch norm's running statistics) are broadcast before every forward in
  // training mode, as PyTorch's broadcast_buffers=True.
  bool broadcast_buffers = true;
  bool find_unused_parameters = false;
  // Reduce the buckets with kiln's ring all-reduce (dist/ring.h) over the group's send/recv instead
  // of the backend's all-reduce: each bucket then reduces on the thread that finishes it.
  bool use_kiln_ring = false;
};

class Reducer;

class DistributedDataParallel : public nn::Module {
 public:
  // group: the default group when null.
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                   std::shared_ptr<ProcessGroup> group = nullptr,
                                   DDPOptions options = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "DistributedDataParallel"; }

  nn::Module& module() { return *module_; }
  ProcessGroup& group() { return *group_; }

  // While the returned guard lives, backward does not reduce (gradient accumulation).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // The buckets as lists of parameter names, in the order they are reduced (for tests and logs).
  std::vector<std::vector<std::string>> bucket_names() const;

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace kiln::dist
