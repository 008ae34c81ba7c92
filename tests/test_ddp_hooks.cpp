// DDP's communication hooks and broadcast_buffers = false, with ranks as threads over Gloo
// (tests/support/dist_ranks.h). Run by test_ddp.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist_ranks.h"
#include "kiln/dist/ddp.h"
#include "kiln/kiln.h"

using namespace kiln;
using kiln::dist::DDPOptions;
using kiln::dist::DistributedDataParallel;
using kiln::dist::ProcessGroup;
using kiln::testing::run_ranks;

namespace {

constexpr int64_t kRows = 8, kIn = 6, kOut = 3;

// The ranks are threads of this process and the default generator is the process's: each
// seeding and the draws after it are one step, so a rank's net never takes another's numbers
// (without the lock rank 0's initial parameters, which DDP broadcasts, could differ from the
// local reference's under another interleaving, as they did under AddressSanitizer).
std::shared_ptr<nn::Sequential> hook_net(uint64_t seed) {
  static std::mutex seeding;
  std::lock_guard<std::mutex> lock(seeding);
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(kIn, 16), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(16, kOut)});
}

// Rank r's rows of step s.
Tensor rows(int rank, int step) {
  Generator gen(static_cast<uint64_t>(1000 + 10 * step + rank));
  return randn({kRows, kIn}, DType::f32, Device::cpu(), &gen);
}

Tensor labels(int rank, int step) {
  Generator gen(static_cast<uint64_t>(2000 + 10 * step + rank));
  return randint(0, kOut, {kRows}, DType::i64, Device::cpu(), &gen);
}

// Each rank's gradients after one backward through DDP with `hook` (none: DDP's own all-reduce).
std::vector<std::vector<Tensor>> reduced_gradients(int n, const dist::CommHook& hook,
                                                   double bucket_cap_mb) {
  return run_ranks<std::vector<Tensor>>(n, "hooks", [&](ProcessGroup& g) {
    std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
    DDPOptions options;
    options.bucket_cap_mb = bucket_cap_mb;
    auto ddp = std::make_shared<DistributedDataParallel>(hook_net(50 + g.rank()), group, options);
    if (hook) ddp->register_comm_hook(hook);
    cross_entropy(ddp->forward(rows(g.rank(), 0)), labels(g.rank(), 0)).backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : ddp->parameters()) grads.push_back(p.grad().clone());
    return grads;
  });
}

// Each rank's own gradients, without DDP, from rank 0's initial parameters.
std::vector<std::vector<Tensor>> local_gradients(int n) {
  std::vector<std::vector<Tensor>> out;
  for (int r = 0; r < n; ++r) {
    auto net = hook_net(50);
    cross_entropy(net->forward(rows(r, 0)), labels(r, 0)).backward();
    out.emplace_back();
    for (const Tensor& p : net->parameters()) out.back().push_back(p.grad().clone());
  }
  return out;
}

}  // namespace

TEST_CASE("ddp hooks: allreduce_hook reduces as DDP does without a hook") {
  for (double cap_mb : {25.0, 0.0002}) {  // one bucket; several
    INFO("buckets of " << cap_mb << " MB");
    const auto want = reduced_gradients(2, nullptr, cap_mb);
    const auto got = reduced_gradients(2, dist::allreduce_hook(), cap_mb);
    for (int r = 0; r < 2; ++r)
      for (size_t k = 0; k < want[r].size(); ++k) CHECK(equal(got[r][k], want[r][k]));
  }
}

TEST_CASE("ddp hooks: fp16 and bf16 compression are PyTorch's, without error feedback") {
  const int n = 2;
  const auto local = local_gradients(n);
  for (DType dtype : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    const dist::CommHook hook =
        dtype == DType::f16 ? dist::fp16_compress_hook() : dist::bf16_compress_hook();
    for (double cap_mb : {25.0, 0.0002}) {
      INFO("buckets of " << cap_mb << " MB");
      const auto got = reduced_gradients(n, hook, cap_mb);
      for (size_t k = 0; k < local[0].size(); ++k) {
        INFO("parameter " << k);
        // Each rank's gradient rounded to 16 bits and divided by 2 there; the two added in f32
        // and rounded once (Gloo's 16-bit sum), then widened back to f32: element by element,
        // whatever the buckets.
        const Tensor c0 = div(local[0][k].to(dtype), 2.0), c1 = div(local[1][k].to(dtype), 2.0);
        const Tensor want = add(c0.to(DType::f32), c1.to(DType::f32)).to(dtype).to(DType::f32);
        const Tensor exact = div(add(local[0][k], local[1][k]), 2.0);
        for (int r = 0; r < n; ++r) {
          CHECK(got[r][k].dtype() == DType::f32);
          CHECK(equal(got[r][k], want));
        }
        // Within the 16-bit type's rounding of the exact average, relative to the terms (f16:
        // 2^-11 per rounding, three of them; bf16: 2^-8), which may cancel.
        const double rtol = dtype == DType::f16 ? 2e-3 : 1.6e-2;
        const Tensor scale = div(add(abs(local[0][k]), abs(local[1][k])), 2.0);
        const Tensor excess = sub(abs(sub(got[0][k], exact)), mul(scale, rtol));
        CHECK(excess.max().item() <= 1e-7);
      }
    }
  }
}

TEST_CASE("ddp hooks: a hook is registered once, before backward, and not with the ring") {
  auto got = run_ranks<std::vector<std::string>>(1, "hook_rules", [&](ProcessGroup& g) {
    std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
    std::vector<std::string> messages;
    auto catch_message = [&](const std::function<void()>& f) {
      try {
        f();
        messages.push_back("no error");
      } catch (const Error& e) {
        messages.push_back(e.what());
      }
    };
    auto ddp = std::make_shared<DistributedDataParallel>(hook_net(1), group);
    ddp->register_comm_hook(dist::allreduce_hook());
    catch_message([&] { ddp->register_comm_hook(dist::fp16_compress_hook()); });
    auto trained = std::make_shared<DistributedDataParallel>(hook_net(1), group);
    cross_entropy(trained->forward(rows(0, 0)), labels(0, 0)).backward();
    catch_message([&] { trained->register_comm_hook(dist::allreduce_hook()); });
    DDPOptions ring;
    ring.use_kiln_ring = true;
    auto with_ring = std::make_shared<DistributedDataParallel>(hook_net(1), group, ring);
    catch_message([&] { with_ring->register_comm_hook(dist::allreduce_hook()); });
    // A hook whose result has another shape.
    auto wrong = std::make_shared<DistributedDataParallel>(hook_net(1), group);
    wrong->register_comm_hook([](ProcessGroup&, dist::GradBucket&) {
      return dist::future_after(nullptr, [] { return zeros({2}); });
    });
    catch_message([&] { cross_entropy(wrong->forward(rows(0, 0)), labels(0, 0)).backward(); });
    return messages;
  });
  REQUIRE(got[0].size() == 4);
  CHECK_THAT(got[0][0], Catch::Contains("a hook is registered already"));
  CHECK_THAT(got[0][1], Catch::Contains("before the first backward"));
  CHECK_THAT(got[0][2], Catch::Contains("use_kiln_ring"));
  CHECK_THAT(got[0][3], Catch::Contains("the communication hook's result for bucket 0 is [2] f32"));
}

TEST_CASE("ddp: broadcast_buffers=false keeps each rank's running statistics") {
  // Batch norm on the input: its running statistics depend on the rank's rows alone.
  auto bn_net = [](uint64_t seed) {
    manual_seed(seed);
    return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::BatchNorm1d>(kIn), std::make_shared<nn::Linear>(kIn, kOut)});
  };
  const int n = 2, steps = 3;
  for (bool broadcast : {false, true}) {
    INFO("broadcast_buffers " << broadcast);
    struct Out {
      Tensor running_mean, running_var, weight;
    };
    auto got = run_ranks<Out>(n, "buffers", [&](ProcessGroup& g) {
      std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
      DDPOptions options;
      options.broadcast_buffers = broadcast;
      auto net = bn_net(70 + g.rank());
      auto ddp = std::make_shared<DistributedDataParallel>(net, group, options);
      optim::SGD opt(ddp->parameters(), {.lr = 0.1});
      for (int s = 0; s < steps; ++s) {
        opt.zero_grad();
        cross_entropy(ddp->forward(rows(g.rank(), s)), labels(g.rank(), s)).backward();
        opt.step();
      }
      auto bn = std::dynamic_pointer_cast<nn::BatchNorm>((*net)[0]);
      return Out{bn->running_mean.clone(), bn->running_var.clone(), net->parameters()[2].clone()};
    });
    // What a batch norm of the rank's own sees: its rows of every step (false), or rank 0's
    // statistics until the last forward and its own rows there (true).
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      nn::BatchNorm1d own(kIn);
      for (int s = 0; s < steps; ++s) {
        if (broadcast && s == steps - 1) {
          nn::BatchNorm1d first(kIn);
          for (int t = 0; t < s; ++t) first.forward(rows(0, t));
          NoGradGuard no_grad;
          own.running_mean.copy_(first.running_mean);
          own.running_var.copy_(first.running_var);
        }
        own.forward(rows(r, s));
      }
      CHECK(allclose(got[r].running_mean, own.running_mean, 1e-6, 1e-7));
      CHECK(allclose(got[r].running_var, own.running_var, 1e-6, 1e-7));
    }
    // The ranks' statistics differ, their parameters do not.
    CHECK_FALSE(allclose(got[0].running_mean, got[1].running_mean));
    CHECK(equal(got[0].weight, got[1].weight));
  }
}
