#include "kiln/dist/ddp.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/autograd/grad_mode.h"
#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/dist/ring.h"
#include "kiln/dist/same_model.h"
#include "kiln/ops/autograd/record.h"
#include "kiln/ops/factories.h"

namespace kiln::dist {

// The buckets and what one backward pass has done to them. Hooks hold it weakly, so a hook that
// outlives its DistributedDataParallel does nothing.
class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  Reducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<ProcessGroup> group,
          const DDPOptions& options)
      : params_(std::move(params)), group_(std::move(group)), options_(options) {
    const auto cap = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024);
    // Reverse order: backward finishes the last layers first, so their bucket fills first.
    for (size_t k = params_.size(); k-- > 0;) {
      const Tensor& p = params_[k].second;
      const int64_t bytes = p.numel() * static_cast<int64_t>(dtype_size(p.dtype()));
      const bool fits = !buckets_.empty() && buckets_.back().dtype == p.dtype() &&
                        buckets_.back().device == p.device() &&
                        buckets_.back().bytes + bytes <= cap;
      if (!fits) buckets_.push_back(Bucket{p.dtype(), p.device()});
      Bucket& b = buckets_.back();
      slots_.push_back(Slot{k, buckets_.size() - 1, b.numel});
      b.slots.push_back(slots_.size() - 1);
      b.numel += p.numel();
      b.bytes += bytes;
    }
    for (Bucket& b : buckets_) b.buffer = zeros({b.numel}, b.dtype, b.device);
    slot_of_param_.resize(params_.size());
    for (size_t s = 0; s < slots_.size(); ++s) slot_of_param_[slots_[s].param] = s;
  }

  void install_hooks() {
    std::weak_ptr<Reducer> self = weak_from_this();
    for (size_t k = 0; k < params_.size(); ++k) {
      params_[k].second.register_post_accumulate_grad_hook([self, k](Tensor&) {
        if (auto reducer = self.lock()) reducer->on_gradient(k);
      });
    }
  }

  bool sync = true;
  CommHook hook;
  bool has_run = false;  // a backward pass has reduced buckets

  // Called by each forward: a backward that threw half-way left its pass unfinished, and the next
  // one starts afresh.
  void prepare_for_backward() { in_pass_ = false; }

  std::vector<std::vector<std::string>> bucket_names() const {
    std::vector<std::vector<std::string>> names;
    for (const Bucket& b : buckets_) {
      names.emplace_back();
      for (size_t s : b.slots) names.back().push_back(params_[slots_[s].param].first);
    }
    return names;
  }

 private:
  struct Slot {
    size_t param;
    size_t bucket;
    int64_t offset;  // in the bucket's buffer, in elements
  };
  struct Bucket {
    DType dtype;
    Device device;
    std::vector<size_t> slots = {};
    int64_t numel = 0, bytes = 0;
    Tensor buffer = {};
    size_t ready = 0;
    std::shared_ptr<Work> work = nullptr;
    std::shared_ptr<BucketFuture> future = nullptr;  // a communication hook's
  };

  // A parameter's gradient is final for this backward pass.
  void on_gradient(size_t param) {
    if (!sync) return;
    if (!in_pass_) start_pass();
    const Slot& slot = slots_[slot_of_param_[param]];
    Bucket& b = buckets_[slot.bucket];
    KILN_CHECK(!seen_[param], DistError,
               "DistributedDataParallel (rank {}): parameter '{}' got its gradient twice in one "
               "backward pass; DDP reduces each gradient once per backward",
               group_->rank(), params_[param].first);
    seen_[param] = true;
    const Tensor grad = params_[param].second.grad();
    // The bucket holds each gradient in the order of its dims; a channels-last one is reordered
    // by this copy, and back by finish_pass's.
    b.buffer.narrow(0, slot.offset, grad.numel()).view(grad.shape()).copy_(grad);
    if (++b.ready == b.slots.size()) launch_ready_buckets();
  }

  void start_pass() {
    in_pass_ = true;
    has_run = true;
    next_launch_ = 0;
    seen_.assign(params_.size(), false);
    for (Bucket& b : buckets_) b.ready = 0, b.work.reset(), b.future.reset();
    std::weak_ptr<Reducer> self = weak_from_this();
    queue_backward_callback([self] {
      if (auto reducer = self.lock()) reducer->finish_pass();
    });
  }

  // Starts the full buckets that are next in order, so every rank starts them in the same order.
  void launch_ready_buckets() {
    while (next_launch_ < buckets_.size() &&
           buckets_[next_launch_].ready == buckets_[next_launch_].slots.size()) {
      Bucket& b = buckets_[next_launch_++];
      // With gloo, the reduction itself is the group's "dist::all_reduce" event, on its thread.
      profiler::OpScope event("ddp::bucket_all_reduce", {&b.buffer}, b.bytes);
      if (options_.use_kiln_ring) {
        ring_all_reduce(*group_, b.buffer, ReduceOp::average);
      } else if (hook) {
        const size_t index = next_launch_ - 1;
        GradBucket bucket{.index = index,
                          .is_last = next_launch_ == buckets_.size(),
                          .buffer = b.buffer,
                          .parameter_names = {}};
        for (size_t s : b.slots) bucket.parameter_names.push_back(params_[slots_[s].param].first);
        b.future = hook(*group_, bucket);
        KILN_CHECK(b.future != nullptr, ValueError,
                   "DistributedDataParallel (rank {}): the communication hook returned no future "
                   "for bucket {}",
                   group_->rank(), index);
      } else {
        b.work = group_->all_reduce_async(b.buffer, ReduceOp::average);
      }
    }
  }

  void finish_pass() {
    in_pass_ = false;
    std::string unused;
    for (size_t k = 0; k < params_.size(); ++k) {
      if (seen_[k]) continue;
      if (!unused.empty()) unused += ", ";
      unused += params_[k].first;
    }
    if (!unused.empty()) {
      // Waiting on the started buckets first keeps the group's order intact for the error path.
      for (size_t i = 0; i < buckets_.size(); ++i) wait_for(i);
      KILN_CHECK(options_.find_unused_parameters, DistError,
                 "DistributedDataParallel (rank {}): these parameters got no gradient in this "
                 "backward pass: {}. Their buckets would wait forever on the other ranks; make "
                 "every parameter take part in the loss, or set "
                 "DDPOptions::find_unused_parameters (they then count as zero gradients)",
                 group_->rank(), unused);
      for (size_t k = 0; k < params_.size(); ++k) {
        if (seen_[k]) continue;
        const Slot& slot = slots_[slot_of_param_[k]];
        Bucket& b = buckets_[slot.bucket];
        b.buffer.narrow(0, slot.offset, params_[k].second.numel()).zero_();
        ++b.ready;
      }
      launch_ready_buckets();
    }
    for (size_t i = 0; i < buckets_.size(); ++i) {
      wait_for(i);
      Bucket& b = buckets_[i];
      for (size_t s : b.slots) {
        Tensor& p = params_[slots_[s].param].second;
        const Tensor average = b.buffer.narrow(0, slots_[s].offset, p.numel()).view(p.shape());
        // Into the .grad backward made (its own contiguous tensor), without a new allocation per
        // parameter and step; an unused parameter gets a copy of its slot.
        Tensor grad = p.grad();
        if (grad.defined())
          grad.copy_(average);
        else
          p.set_grad(average.clone());
      }
    }
  }

  // Bucket i's reduction is in its buffer once this returns.
  void wait_for(size_t i) {
    Bucket& b = buckets_[i];
    if (b.work) b.work->wait();
    if (!b.future) return;
    const Tensor reduced = b.future->wait();
    b.future.reset();
    KILN_CHECK(reduced.defined() && reduced.shape() == b.buffer.shape(), ShapeError,
               "DistributedDataParallel (rank {}): the communication hook's result for bucket {} "
               "is {}; expected the bucket's shape, {}",
               group_->rank(), i, describe(reduced), describe(b.buffer));
    if (!reduced.is_same(b.buffer)) b.buffer.copy_(reduced);
  }

  std::vector<std::pair<std::string, Tensor>> params_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;
  std::vector<size_t> slot_of_param_;
  std::vector<bool> seen_;
  size_t next_launch_ = 0;
  bool in_pass_ = false;
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 DDPOptions options)
    : module_(std::move(module)),
      group_(group ? std::move(group) : default_group_ptr()),
      options_(options) {
  KILN_CHECK(module_ != nullptr, ValueError,
             "DistributedDataParallel: expected a module, got null");
  KILN_CHECK(options.bucket_cap_mb > 0, ValueError,
             "DistributedDataParallel: bucket_cap_mb must be positive, got {}",
             options.bucket_cap_mb);
  register_module("module", module_);
  NoGradGuard no_grad;
  check_same_model(*module_, *group_);
  std::vector<std::pair<std::string, Tensor>> trained;
  for (auto& [name, p] : module_->named_parameters()) {
    group_->broadcast(p, 0);
    if (p.requires_grad()) trained.emplace_back(name, p);
  }
  for (auto& [name, b] : module_->named_buffers()) group_->broadcast(b, 0);
  reducer_ = std::make_shared<Reducer>(std::move(trained), group_, options_);
  reducer_->install_hooks();
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (options_.broadcast_buffers && is_training() && group_->size() > 1) {
    NoGradGuard no_grad;
    for (auto& [name, b] : module_->named_buffers()) group_->broadcast(b, 0);
  }
  reducer_->prepare_for_backward();
  return module_->forward(x);
}

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  KILN_CHECK(hook != nullptr, ValueError,
             "DistributedDataParallel::register_comm_hook: expected a hook, got none");
  KILN_CHECK(!reducer_->hook, ValueError,
             "DistributedDataParallel::register_comm_hook: a hook is registered already; "
             "register one hook, once");
  KILN_CHECK(!reducer_->has_run, ValueError,
             "DistributedDataParallel::register_comm_hook: register the hook before the first "
             "backward, so that every bucket of every pass is reduced the same way on every rank");
  KILN_CHECK(!options_.use_kiln_ring, ValueError,
             "DistributedDataParallel::register_comm_hook: DDPOptions::use_kiln_ring reduces the "
             "buckets with kiln's ring; a hook replaces that reduction, so use one or the other");
  reducer_->hook = std::move(hook);
}

namespace {

class WorkFuture : public BucketFuture {
 public:
  WorkFuture(std::shared_ptr<Work> work, std::function<Tensor()> then)
      : work_(std::move(work)), then_(std::move(then)) {}
  Tensor wait() override {
    if (work_) work_->wait();
    return then_();
  }

 private:
  std::shared_ptr<Work> work_;
  std::function<Tensor()> then_;
};

// PyTorch's fp16_compress_hook and bf16_compress_hook, for `dtype`.
CommHook compress_hook(DType dtype) {
  return [dtype](ProcessGroup& group, GradBucket& bucket) {
    Tensor compressed = bucket.buffer.to(dtype);
    compressed.div_(static_cast<double>(group.size()));
    return future_after(group.all_reduce_async(compressed, ReduceOp::sum),
                        [compressed] { return compressed; });
  };
}

}  // namespace

std::shared_ptr<BucketFuture> future_after(std::shared_ptr<Work> work,
                                           std::function<Tensor()> then) {
  KILN_CHECK(then != nullptr, ValueError, "future_after: expected a function, got none");
  return std::make_shared<WorkFuture>(std::move(work), std::move(then));
}

CommHook allreduce_hook() {
  return [](ProcessGroup& group, GradBucket& bucket) {
    const Tensor buffer = bucket.buffer;
    return future_after(group.all_reduce_async(buffer, ReduceOp::average),
                        [buffer] { return buffer; });
  };
}

CommHook fp16_compress_hook() {
  return compress_hook(DType::f16);
}

CommHook bf16_compress_hook() {
  return compress_hook(DType::bf16);
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_names() const {
  return reducer_->bucket_names();
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.reducer_->sync) {
  ddp_.reducer_->sync = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() {
  ddp_.reducer_->sync = previous_;
}

}  // namespace kiln::dist
