// Data-parallel training on simulated GPUs through the nccl backend, held against one simulated
// GPU training the same model on the whole batch (with the batch split evenly and a mean loss,
// averaging the ranks' gradients gives the whole batch's gradient) and against the gloo backend
// on the CPU: DDP with several buckets, DDP over kiln's ring, no_sync accumulation,
// SyncBatchNorm, and the GradScaler under DDP (an overflow on one rank skips the step on all).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "job.h"
#include "kiln/core/backends.h"
#include "kiln/dist/ddp.h"
#include "kiln/dist/process_group.h"
#include "kiln/dist/store.h"
#include "kiln/dist/sync_batch_norm.h"
#include "kiln/kiln.h"

namespace nccl_job {

using namespace kiln;
using dist::DDPOptions;
using dist::DistributedDataParallel;

namespace {

constexpr int64_t kGlobalBatch = 128, kClasses = 10;

struct Batch {
  Tensor x, y;
};

// The global batch of a step, on the host: every rank and the reference draw the same.
Batch global_batch(int step) {
  Generator gen(1000 + static_cast<uint64_t>(step));
  return {randn({kGlobalBatch, 1, 8, 8}, DType::f32, Device::cpu(), &gen),
          randint(0, kClasses, {kGlobalBatch}, DType::i64, Device::cpu(), &gen)};
}

Batch shard(const Batch& b, Device device) {
  const int n = dist::get_world_size(), r = dist::get_rank();
  const int64_t per = b.x.size(0) / n;
  return {b.x.narrow(0, r * per, per).to(device), b.y.narrow(0, r * per, per).to(device)};
}

// A convolution, batch norm (synced under DDP, so that it sees the global batch) and a linear
// layer; the same weights for every seed-3 call.
std::shared_ptr<nn::Sequential> make_net(Device device) {
  manual_seed(3);
  auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(4 * 6 * 6, kClasses)});
  net->to(device);
  return net;
}

std::vector<Tensor> snapshot(const nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.detach().cpu().clone());
  return out;
}

// 10 SGD steps with momentum on one device, the whole batch each step.
std::vector<Tensor> train_whole_batch(Device device) {
  auto net = make_net(device);
  optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < 10; ++s) {
    const Batch b = global_batch(s);
    opt.zero_grad();
    cross_entropy(net->forward(b.x.to(device)), b.y.to(device)).backward();
    opt.step();
  }
  return snapshot(*net);
}

// The same 10 steps under DDP over `group`, each rank on its shard of every batch.
std::vector<Tensor> train_ddp(std::shared_ptr<dist::ProcessGroup> group, Device device,
                              DDPOptions options) {
  auto net = make_net(device);
  dist::convert_sync_batchnorm(*net, group);
  auto ddp = std::make_shared<DistributedDataParallel>(net, group, options);
  optim::SGD opt(ddp->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < 10; ++s) {
    const Batch b = shard(global_batch(s), device);
    opt.zero_grad();
    cross_entropy(ddp->forward(b.x), b.y).backward();
    opt.step();
  }
  return snapshot(*ddp);
}

void expect_same_on_every_rank(const std::vector<Tensor>& params, const std::string& what) {
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor mine = params[k].to(gpu());
    const Tensor first = mine.clone();
    dist::broadcast(first, 0);
    expect_equal(mine, first, what + ": parameter " + std::to_string(k) + " as rank 0's");
  }
}

// f32 sums in another order (per-rank halves, then the all-reduce) for 10 steps.
constexpr double kStepsTolerance = 1e-4;

void expect_params_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                         const std::string& what) {
  expect(got.size() == want.size(), what + ": as many parameters");
  for (size_t k = 0; k < got.size(); ++k)
    expect_close(got[k], want[k], kStepsTolerance, kStepsTolerance,
                 what + ": parameter " + std::to_string(k));
}

}  // namespace

void ddp(const std::string& scratch) {
  const int n = dist::get_world_size(), r = dist::get_rank();
  // f32 on both sides: the comparison with gloo on the CPU is one of f32 sums in another order,
  // not of TF32's rounding, which GPU convolutions use by default.
  const backends::Tf32Scope f32(false);
  // Buckets of 200 bytes: the Linear's weight alone, and the rest in several more, reduced while
  // backward goes on.
  const std::vector<Tensor> nccl =
      train_ddp(dist::default_group_ptr(), gpu(), {.bucket_cap_mb = 200e-6});
  expect_same_on_every_rank(nccl, "DDP over nccl");
  const std::vector<Tensor> ring =
      train_ddp(dist::default_group_ptr(), gpu(), {.use_kiln_ring = true});
  expect_same_on_every_rank(ring, "DDP over kiln's ring on nccl");
  // The same job on the CPU through gloo, its ranks meeting in a file store.
  std::shared_ptr<dist::ProcessGroup> gloo = dist::new_process_group(
      "gloo", dist::make_file_store(scratch, std::chrono::seconds(60)), r, n, "gloo");
  const std::vector<Tensor> cpu = train_ddp(gloo, Device::cpu(), {});
  if (r != 0) return;
  const std::vector<Tensor> whole = train_whole_batch(gpu());
  expect_params_close(nccl, whole, "2 simulated GPUs x batch 64 against 1 with batch 128");
  expect_params_close(ring, whole, "DDP over the ring against 1 simulated GPU");
  expect_params_close(nccl, cpu, "DDP over nccl against DDP over gloo on the CPU");
}

void no_sync() {
  const int n = dist::get_world_size();
  auto net = make_net(gpu());
  auto ddp = std::make_shared<DistributedDataParallel>(net);
  {
    auto guard = ddp->no_sync();
    for (int s = 0; s < 2; ++s) {
      const Batch b = shard(global_batch(s), gpu());
      cross_entropy(ddp->forward(b.x), b.y).backward();
    }
  }
  // Not reduced inside no_sync: the ranks' accumulated gradients differ.
  const Tensor local = ddp->parameters().back().grad().clone();
  std::vector<Tensor> locals;
  for (int q = 0; q < n; ++q) locals.push_back(zeros_like(local));
  dist::all_gather(locals, local);
  expect(!equal(locals[0].cpu(), locals[1].cpu()), "no_sync leaves each rank its own gradient");
  const Batch b = shard(global_batch(2), gpu());
  cross_entropy(ddp->forward(b.x), b.y).backward();
  // The sum over the three micro-batches of the whole batch's gradient. DDP's BatchNorm is not
  // synced here, so the reference normalises each rank's shard on its own, as DDP's does.
  auto ref = make_net(gpu());
  for (int s = 0; s < 3; ++s) {
    const Batch whole = global_batch(s);
    const int64_t per = kGlobalBatch / n;
    for (int q = 0; q < n; ++q) {
      const Tensor x = whole.x.narrow(0, q * per, per).to(gpu());
      const Tensor y = whole.y.narrow(0, q * per, per).to(gpu());
      div(cross_entropy(ref->forward(x), y), static_cast<double>(n)).backward();
    }
  }
  const std::vector<Tensor> got = ddp->parameters(), want = ref->parameters();
  for (size_t k = 0; k < got.size(); ++k)
    expect_close(got[k].grad(), want[k].grad(), 1e-5, 1e-6,
                 "no_sync then a synced backward: gradient " + std::to_string(k));
}

// PyTorch's fp16 and bf16 compression hooks over nccl, with buckets of 200 bytes: each rank's
// gradient rounded to 16 bits and divided by the world size there, summed over the ranks in 16
// bits (one rounding of a sum of two), widened back into the f32 gradient: bit for bit.
void comm_hooks() {
  const int n = dist::get_world_size();
  const backends::Tf32Scope f32(false);
  const Batch b = shard(global_batch(0), gpu());
  // This rank's own gradient, from the weights DDP starts from (make_net seeds alike); with
  // batch norm not synced, DDP's forward normalises the same shard the same way.
  auto local = make_net(gpu());
  cross_entropy(local->forward(b.x), b.y).backward();
  const std::vector<Tensor> local_params = local->parameters();
  for (DType dtype : {DType::f16, DType::bf16}) {
    auto ddp = std::make_shared<DistributedDataParallel>(make_net(gpu()), nullptr,
                                                         DDPOptions{.bucket_cap_mb = 200e-6});
    ddp->register_comm_hook(dtype == DType::f16 ? dist::fp16_compress_hook()
                                                : dist::bf16_compress_hook());
    cross_entropy(ddp->forward(b.x), b.y).backward();
    const std::vector<Tensor> got = ddp->parameters();
    for (size_t k = 0; k < got.size(); ++k) {
      const Tensor mine = local_params[k].grad().contiguous();
      std::vector<Tensor> all;
      for (int q = 0; q < n; ++q) all.push_back(zeros_like(mine));
      dist::all_gather(all, mine);
      Tensor want = zeros_like(mine);
      for (const Tensor& g : all)
        want = add(want, div(g.to(dtype), static_cast<double>(n)).to(DType::f32));
      // The NCCL model adds two 16-bit values in f32 and rounds once, as this does.
      expect(got[k].grad().dtype() == DType::f32, "the compressed gradient comes back in f32");
      expect_equal(got[k].grad(), want.to(dtype).to(DType::f32),
                   std::string(dtype_name(dtype)) + " compression: gradient " + std::to_string(k));
    }
  }
}

void sync_batch_norm() {
  const int n = dist::get_world_size(), r = dist::get_rank();
  const int64_t batch = 6, per = batch / n;
  Generator gen(5);
  const Tensor x = randn({batch, 3, 4, 5}, DType::f32, Device::cpu(), &gen).to(gpu());
  const Tensor upstream = randn({batch, 3, 4, 5}, DType::f32, Device::cpu(), &gen).to(gpu());
  auto make_bn = [] {
    auto bn = std::make_shared<nn::BatchNorm2d>(3);
    bn->to(gpu());
    NoGradGuard no_grad;
    bn->weight.copy_(tensor({0.5, 1.5, -1.0}).to(DType::f32));
    bn->bias.copy_(tensor({0.1, 0.0, -0.2}).to(DType::f32));
    return bn;
  };
  // The whole batch on this rank's GPU.
  auto ref = make_bn();
  Tensor ref_x = x.clone();
  ref_x.requires_grad_();
  const Tensor ref_out = ref->forward(ref_x);
  sum(mul(ref_out, upstream)).backward();

  auto bn = make_bn();
  expect(dist::convert_sync_batchnorm(*bn) == 1, "one BatchNorm converted");
  Tensor mine = x.narrow(0, r * per, per).clone();
  mine.requires_grad_();
  const Tensor out = bn->forward(mine);
  sum(mul(out, upstream.narrow(0, r * per, per))).backward();
  const double tol = 1e-5;
  expect_close(out, ref_out.narrow(0, r * per, per), tol, tol, "SyncBatchNorm's output");
  expect_close(mine.grad(), ref_x.grad().narrow(0, r * per, per), tol, tol,
               "SyncBatchNorm's input gradient");
  expect_close(bn->running_mean, ref->running_mean, tol, tol, "running mean");
  expect_close(bn->running_var, ref->running_var, tol, tol, "running variance");
  // Each rank holds its shard's part of the parameter gradients (DDP would average them).
  const Tensor w = bn->weight.grad().clone(), b = bn->bias.grad().clone();
  dist::all_reduce(w);
  dist::all_reduce(b);
  expect_close(w, ref->weight.grad(), tol, tol, "the weight's gradient summed over the ranks");
  expect_close(b, ref->bias.grad(), tol, tol, "the bias's gradient summed over the ranks");
}

void grad_scaler() {
  const int r = dist::get_rank();
  constexpr int kSteps = 4, kOverflowStep = 2;
  // Step 2's batch holds an inf in rank 1's shard: every rank's reduced gradients are then NaN,
  // so every scaler (the whole batch's too) skips that step and backs off.
  auto batch = [](int s) {
    Batch b = global_batch(s);
    if (s == kOverflowStep)
      b.x.narrow(0, kGlobalBatch - 1, 1).fill_(std::numeric_limits<double>::infinity());
    return b;
  };
  auto train = [&](bool distributed) {
    auto net = make_net(gpu());
    std::shared_ptr<nn::Module> model = net;
    if (distributed) {
      dist::convert_sync_batchnorm(*net);
      model = std::make_shared<DistributedDataParallel>(net);
    }
    optim::SGD opt(model->parameters(), {.lr = 0.05});
    optim::GradScaler scaler({.init_scale = 1024.0});
    std::vector<double> scales;
    std::vector<bool> stepped;
    for (int s = 0; s < kSteps; ++s) {
      const Batch whole = batch(s);
      const Batch b =
          distributed ? shard(whole, gpu()) : Batch{whole.x.to(gpu()), whole.y.to(gpu())};
      opt.zero_grad();
      Tensor loss;
      {
        autocast amp(DType::f16);
        loss = cross_entropy(model->forward(b.x), b.y);
      }
      scaler.scale(loss).backward();
      stepped.push_back(scaler.step(opt));
      scaler.update();
      scales.push_back(scaler.get_scale());
    }
    return std::make_tuple(snapshot(*net), scales, stepped);
  };
  const auto [params, scales, stepped] = train(true);
  for (int s = 0; s < kSteps; ++s)
    expect(stepped[s] == (s != kOverflowStep), "rank " + std::to_string(r) + " stepped at step " +
                                                   std::to_string(s) +
                                                   " unless its reduced gradients overflowed");
  expect(scales.back() == 512.0, "the scale backed off once, on every rank");
  expect_same_on_every_rank(params, "DDP with the GradScaler");
  if (r != 0) return;
  const auto [whole, whole_scales, whole_stepped] = train(false);
  expect(whole_scales == scales && whole_stepped == stepped,
         "the scaler under DDP as on one GPU with the whole batch");
  // f16 products of half batches against whole ones.
  for (size_t k = 0; k < params.size(); ++k)
    expect_close(params[k], whole[k], 2e-3, 2e-3, "amp under DDP: parameter " + std::to_string(k));
}

}  // namespace nccl_job
