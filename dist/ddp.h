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

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/dist/process_group.h"
#include "kiln/nn/module.h"

namespace kiln::dist {

// ---- communication hooks, as PyTorch's DistributedDataParallel.register_comm_hook ----

// A bucket of gradients, as DDP hands it to a communication hook once backward has filled it.
struct GradBucket {
  size_t index = 0;      // buckets are numbered in the order they are reduced (bucket_names())
  bool is_last = false;  // the pass's last bucket
  Tensor buffer{};       // this rank's gradients of the bucket, flat, in the parameters' dtype
  std::vector<std::string> parameter_names = {};  // in the buffer's order
};

// The reduced bucket to come: what a hook returns (PyTorch's Future[Tensor]).
class BucketFuture {
 public:
  virtual ~BucketFuture() = default;
  // Blocks until the result is ready (on a GPU: until the current stream is ordered after it)
  // and returns it: a tensor of the bucket buffer's shape, of any floating dtype, which DDP
  // copies into the bucket and from there into each parameter's .grad.
  virtual Tensor wait() = 0;
};

// The future of `then()` run once `work` is done: a hook's collective and what follows it
// (PyTorch's fut.then(decompress)).
std::shared_ptr<BucketFuture> future_after(std::shared_ptr<Work> work,
                                           std::function<Tensor()> then);

// Starts the reduction of `bucket` over `group` and returns its future. It runs on the thread
// that finished the bucket, during backward (grad mode off), for every bucket in the same order
// on every rank; the buffer is DDP's, so a hook may reduce it in place.
using CommHook = std::function<std::shared_ptr<BucketFuture>(ProcessGroup&, GradBucket&)>;

// PyTorch's default hooks. allreduce_hook: the average over the ranks, what DDP does without a
// hook. fp16_compress_hook and bf16_compress_hook: the buffer cast to the 16-bit type and divided
// by the world size (before the sum, so that a sum cannot overflow where the average would not),
// summed over the ranks in that type, and cast back into the buffer; no error feedback.
CommHook allreduce_hook();
CommHook fp16_compress_hook();
CommHook bf16_compress_hook();

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

  // Reduces every bucket with `hook` from now on, instead of DDP's all-reduce average. Once per
  // DistributedDataParallel, before its first backward, and not with use_kiln_ring.
  void register_comm_hook(CommHook hook);

  // The buckets as lists of parameter names, in the order they are reduced (for tests and logs).
  std::vector<std::vector<std::string>> bucket_names() const;

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace kiln::dist
