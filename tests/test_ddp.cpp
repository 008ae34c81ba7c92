// DistributedDataParallel with ranks as threads (tests/support/dist_ranks.h), held against one
// process that trains the same model on the whole batch: with the batch split evenly and a mean
// loss, averaging the ranks' gradients gives exactly the whole batch's gradient, so after each
// step the parameters must agree (in f64, to rounding).
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist_ranks.h"
#include "kiln/dist/ddp.h"
#include "kiln/dist/sync_batch_norm.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::dist::DDPOptions;
using kiln::dist::DistributedDataParallel;
using kiln::dist::ProcessGroup;
using kiln::testing::check_close;
using kiln::testing::run_ranks;
using kiln::testing::Tolerance;

namespace {

constexpr int64_t kBatch = 12, kIn = 5, kHidden = 7, kOut = 3;

std::shared_ptr<nn::Sequential> make_net(uint64_t seed) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(kIn, kHidden), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(kHidden, kHidden), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(kHidden, kOut)});
  net->to(DType::f64);
  return net;
}

struct Batch {
  Tensor x, y;
};

Batch make_batch(uint64_t seed) {
  Generator gen(seed);
  return {randn({kBatch, kIn}, DType::f64, Device::cpu(), &gen),
          randint(0, kOut, {kBatch}, DType::i64, Device::cpu(), &gen)};
}

Batch shard(const Batch& b, int rank, int n) {
  const int64_t per = kBatch / n;
  return {b.x.narrow(0, rank * per, per), b.y.narrow(0, rank * per, per)};
}

std::vector<Tensor> snapshot(nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

// The whole-batch reference: `steps` SGD steps of a net initialised like rank 0's.
std::vector<Tensor> train_reference(int steps) {
  auto net = make_net(100);
  optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    const Batch b = make_batch(s);
    opt.zero_grad();
    cross_entropy(net->forward(b.x), b.y).backward();
    opt.step();
  }
  return snapshot(*net);
}

// Each rank starts from its own seed (DDP must broadcast rank 0's parameters) and trains on its
// shard.
std::vector<std::vector<Tensor>> train_ddp(int n, int steps, DDPOptions options) {
  std::vector<std::shared_ptr<nn::Sequential>> nets;
  for (int r = 0; r < n; ++r) nets.push_back(make_net(100 + r));
  return run_ranks<std::vector<Tensor>>(n, "ddp", [&](ProcessGroup& g) {
    std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
    auto ddp = std::make_shared<DistributedDataParallel>(nets[g.rank()], group, options);
    optim::SGD opt(ddp->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int s = 0; s < steps; ++s) {
      const Batch b = shard(make_batch(s), g.rank(), n);
      opt.zero_grad();
      cross_entropy(ddp->forward(b.x), b.y).backward();
      opt.step();
    }
    return snapshot(*ddp);
  });
}

const Tolerance kF64Steps{1e-12, 1e-12};

}  // namespace

TEST_CASE("ddp: training on shards matches one process on the whole batch") {
  const std::vector<Tensor> want = train_reference(3);
  for (int n : {1, 2, 3, 4}) {
    for (double cap_mb : {25.0, 0.0002}) {  // one bucket; a bucket per parameter or two
      for (bool ring : {false, true}) {
        INFO(n << " ranks, buckets of " << cap_mb << " MB, " << (ring ? "kiln ring" : "gloo"));
        DDPOptions options;
        options.bucket_cap_mb = cap_mb;
        options.use_kiln_ring = ring;
        const auto got = train_ddp(n, 3, options);
        for (const auto& params : got) {
          REQUIRE(params.size() == want.size());
          for (size_t k = 0; k < want.size(); ++k) check_close(params[k], want[k], kF64Steps);
        }
      }
    }
  }
}

TEST_CASE("ddp: buckets hold parameters in reverse order, within the cap") {
  auto net = make_net(1);
  auto got = run_ranks<std::vector<std::vector<std::string>>>(1, "buckets", [&](ProcessGroup& g) {
    std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
    DDPOptions options;
    options.bucket_cap_mb =
        (kHidden * kHidden + kHidden) * 8.0 / (1024 * 1024);  // one hidden layer
    return DistributedDataParallel(net, group, options).bucket_names();
  });
  // Filled greedily from the last parameter: 24 + 168 + 56 bytes, then 392 + 56 (504 is the cap),
  // then 280. Names are the wrapped module's own.
  const std::vector<std::vector<std::string>> want = {
      {"4.bias", "4.weight", "2.bias"}, {"2.weight", "0.bias"}, {"0.weight"}};
  CHECK(got[0] == want);
}

TEST_CASE("ddp: no_sync accumulates locally and the next backward reduces the sum") {
  const int n = 2;
  std::vector<std::shared_ptr<nn::Sequential>> nets{make_net(7), make_net(8)};
  struct Out {
    std::vector<Tensor> local, reduced;
  };
  auto got = run_ranks<Out>(n, "no_sync", [&](ProcessGroup& g) {
    std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
    auto ddp = std::make_shared<DistributedDataParallel>(nets[g.rank()], group);
    Out out;
    {
      auto guard = ddp->no_sync();
      const Batch a = shard(make_batch(20), g.rank(), n);
      cross_entropy(ddp->forward(a.x), a.y).backward();
    }
    for (const Tensor& p : ddp->parameters()) out.local.push_back(p.grad().clone());
    const Batch b = shard(make_batch(21), g.rank(), n);
    cross_entropy(ddp->forward(b.x), b.y).backward();
    for (const Tensor& p : ddp->parameters()) out.reduced.push_back(p.grad().clone());
    return out;
  });
  // Reference: the mean over ranks of each rank's two accumulated micro-batch gradients.
  auto ref = make_net(7);
  for (int r = 0; r < n; ++r)
    for (uint64_t seed : {20, 21}) {
      const Batch s = shard(make_batch(seed), r, n);
      cross_entropy(ref->forward(s.x), s.y).backward();
    }
  const std::vector<Tensor> ref_params = ref->parameters();
  for (size_t k = 0; k < ref_params.size(); ++k) {
    INFO("parameter " << k);
    CHECK_FALSE(equal(got[0].local[k], got[1].local[k]));  // not reduced inside no_sync
    for (int r = 0; r < n; ++r)
      check_close(got[r].reduced[k], div(ref_params[k].grad(), n), kF64Steps);
  }
}

TEST_CASE("ddp: a parameter without a gradient is named, or counts as zero when allowed") {
  // A net whose last layer is skipped: its parameters get no gradient.
  struct Skip : nn::Module {
    std::shared_ptr<nn::Linear> used, unused;
    Skip() {
      used = register_module("used", std::make_shared<nn::Linear>(3, 2));
      unused = register_module("unused", std::make_shared<nn::Linear>(2, 2));
    }
    Tensor forward(const Tensor& x) override { return used->forward(x); }
  };
  for (bool find_unused : {false, true}) {
    INFO("find_unused_parameters " << find_unused);
    auto got = run_ranks<std::string>(2, "unused", [&](ProcessGroup& g) -> std::string {
      std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
      DDPOptions options;
      options.find_unused_parameters = find_unused;
      auto ddp =
          std::make_shared<DistributedDataParallel>(std::make_shared<Skip>(), group, options);
      try {
        sum(ddp->forward(ones({4, 3}))).backward();
      } catch (const DistError& e) {
        return e.what();
      }
      const Tensor g_unused = ddp->named_parameters()[2].second.grad();
      return g_unused.defined() && equal(g_unused, zeros_like(g_unused)) ? "zero" : "not zero";
    });
    for (const std::string& message : got) {
      if (find_unused)
        CHECK(message == "zero");
      else
        CHECK_THAT(message, Catch::Contains("unused.weight, unused.bias") &&
                                Catch::Contains("find_unused_parameters"));
    }
  }
}

TEST_CASE("ddp: SyncBatchNorm over the ranks' shards equals BatchNorm over the whole batch") {
  for (int n : {2, 3}) {
    INFO(n << " ranks");
    Generator gen(5);
    const Tensor x = randn({6, 3, 4, 5}, DType::f64, Device::cpu(), &gen);
    const Tensor upstream = randn({6, 3, 4, 5}, DType::f64, Device::cpu(), &gen);
    auto make_bn = [] {
      auto bn = std::make_shared<nn::BatchNorm2d>(3);
      bn->to(DType::f64);
      NoGradGuard no_grad;
      bn->weight.copy_(tensor({0.5, 1.5, -1.0}));
      bn->bias.copy_(tensor({0.1, 0.0, -0.2}));
      return bn;
    };
    // The whole batch in one process.
    auto ref = make_bn();
    Tensor ref_x = x.clone();
    ref_x.requires_grad_();
    const Tensor ref_out = ref->forward(ref_x);
    sum(mul(ref_out, upstream)).backward();

    struct Out {
      Tensor out, x_grad, w_grad, b_grad, running_mean, running_var;
    };
    const int64_t per = 6 / n;
    auto got = run_ranks<Out>(n, "syncbn", [&](ProcessGroup& g) {
      std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
      auto bn = make_bn();
      CHECK(dist::convert_sync_batchnorm(*bn, group) == 1);
      Tensor mine = x.narrow(0, g.rank() * per, per).clone();
      mine.requires_grad_();
      const Tensor out = bn->forward(mine);
      sum(mul(out, upstream.narrow(0, g.rank() * per, per))).backward();
      return Out{out.detach(),    mine.grad(),      bn->weight.grad(),
                 bn->bias.grad(), bn->running_mean, bn->running_var};
    });
    Tensor w_total = zeros({3}, DType::f64), b_total = zeros({3}, DType::f64);
    for (int r = 0; r < n; ++r) {
      check_close(got[r].out, ref_out.narrow(0, r * per, per).detach(), kF64Steps);
      check_close(got[r].x_grad, ref_x.grad().narrow(0, r * per, per), kF64Steps);
      check_close(got[r].running_mean, ref->running_mean, kF64Steps);
      check_close(got[r].running_var, ref->running_var, kF64Steps);
      w_total = add(w_total, got[r].w_grad);
      b_total = add(b_total, got[r].b_grad);
    }
    // Each rank holds its shard's part of the parameter gradients; DDP would average them.
    check_close(w_total, ref->weight.grad(), kF64Steps);
    check_close(b_total, ref->bias.grad(), kF64Steps);
  }
}

TEST_CASE("ddp: 2 ranks x batch 64 equal one process with batch 128 for 10 steps, in f32") {
  auto make = [](uint64_t seed) {
    manual_seed(seed);
    return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::BatchNorm2d>(4),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(4 * 6 * 6, 10)});
  };
  auto batch = [](int step) {
    Generator gen(1000 + step);
    return Batch{randn({128, 1, 8, 8}, DType::f32, Device::cpu(), &gen),
                 randint(0, 10, {128}, DType::i64, Device::cpu(), &gen)};
  };
  auto ref = make(3);
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < 10; ++s) {
    const Batch b = batch(s);
    ref_opt.zero_grad();
    cross_entropy(ref->forward(b.x), b.y).backward();
    ref_opt.step();
  }
  std::vector<std::shared_ptr<nn::Sequential>> nets{make(3), make(4)};
  auto got = run_ranks<std::vector<Tensor>>(2, "ddp-f32", [&](ProcessGroup& g) {
    std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
    dist::convert_sync_batchnorm(*nets[g.rank()], group);  // BatchNorm sees the global batch
    auto ddp = std::make_shared<DistributedDataParallel>(nets[g.rank()], group);
    optim::SGD opt(ddp->parameters(), {.lr = 0.05, .momentum = 0.9});
    for (int s = 0; s < 10; ++s) {
      const Batch b = batch(s);
      opt.zero_grad();
      cross_entropy(ddp->forward(b.x.narrow(0, 64 * g.rank(), 64)),
                    b.y.narrow(0, 64 * g.rank(), 64))
          .backward();
      opt.step();
    }
    return snapshot(*ddp);
  });
  const std::vector<Tensor> want = snapshot(*ref);
  for (const auto& params : got)
    for (size_t k = 0; k < want.size(); ++k) {
      INFO("parameter " << k);
      // f32 sums in another order (per-rank halves, then the all-reduce) for 10 steps.
      check_close(params[k], want[k], kiln::testing::tolerance(DType::f32).times(10));
    }
}

// A channels-last ResNet under DDP with SyncBatchNorm, as guide sections 8 and 10 combine them:
// every collective takes the channels-last weights, the ranks end equal to the bit, and the run
// equals the NCHW one (the CPU computes channels-last in NCHW and lays the results out).
TEST_CASE("ddp: a channels-last ResNet trains on 2 ranks with SyncBatchNorm, as the NCHW one") {
  auto train = [](MemoryFormat format) {
    std::vector<std::shared_ptr<nn::ResNet>> nets;
    for (uint64_t r = 0; r < 2; ++r) {
      manual_seed(40 + r);
      nets.push_back(nn::resnet20());
      nets.back()->to(format);
    }
    return run_ranks<std::vector<Tensor>>(2, "ddp-channels-last", [&](ProcessGroup& g) {
      std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
      dist::convert_sync_batchnorm(*nets[g.rank()], group);
      auto ddp = std::make_shared<DistributedDataParallel>(nets[g.rank()], group);
      optim::SGD opt(ddp->parameters(), {.lr = 0.05, .momentum = 0.9});
      for (int s = 0; s < 2; ++s) {
        Generator gen(60 + s);
        const Tensor x = randn({8, 3, 8, 8}, DType::f32, Device::cpu(), &gen);
        const Tensor y = randint(0, 10, {8}, DType::i64, Device::cpu(), &gen);
        opt.zero_grad();
        cross_entropy(ddp->forward(x.narrow(0, 4 * g.rank(), 4).to(format)),
                      y.narrow(0, 4 * g.rank(), 4))
            .backward();
        opt.step();
      }
      std::vector<Tensor> out;
      for (const Tensor& p : ddp->parameters()) out.push_back(p.detach());
      return out;
    });
  };
  const auto nchw = train(MemoryFormat::contiguous);
  const auto channels_last = train(MemoryFormat::channels_last);
  REQUIRE(channels_last[0].size() == nchw[0].size());
  REQUIRE(channels_last[0][0].dim() == 4);
  CHECK(channels_last[0][0].is_contiguous(MemoryFormat::channels_last));
  for (size_t k = 0; k < nchw[0].size(); ++k) {
    INFO("parameter " << k);
    CHECK(equal(channels_last[0][k], channels_last[1][k]));
    check_close(channels_last[0][k], nchw[0][k], kiln::testing::tolerance(DType::f32).times(10));
  }
}

// A ViT under DDP: 2 ranks x 4 images equal one process on the 8 (a transformer has no batch
// statistics, so only the order of the f32 sums differs). SGD, not Adam: the keys' share of
// in_proj_bias has a gradient of exactly 0 in exact arithmetic (softmax ignores a constant added
// to every score of a row), and Adam turns its f32 rounding noise into steps of the full rate.
TEST_CASE("ddp: a ViT on 2 ranks equals one process on the whole batch") {
  auto make = [](uint64_t seed) {
    manual_seed(seed);
    return nn::make_vit("vit-mini", {.num_classes = 10, .in_channels = 1, .image_size = 8});
  };
  auto batch = [](int step) {
    Generator gen(70 + step);
    return Batch{randn({8, 1, 8, 8}, DType::f32, Device::cpu(), &gen),
                 randint(0, 10, {8}, DType::i64, Device::cpu(), &gen)};
  };
  auto ref = make(50);
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < 3; ++s) {
    const Batch b = batch(s);
    ref_opt.zero_grad();
    cross_entropy((*ref)(b.x), b.y).backward();
    ref_opt.step();
  }
  std::vector<std::shared_ptr<nn::VisionTransformer>> nets{make(50), make(51)};
  auto got = run_ranks<std::vector<Tensor>>(2, "ddp-vit", [&](ProcessGroup& g) {
    std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
    auto ddp = std::make_shared<DistributedDataParallel>(nets[g.rank()], group);
    optim::SGD opt(ddp->parameters(), {.lr = 0.05, .momentum = 0.9});
    for (int s = 0; s < 3; ++s) {
      const Batch b = batch(s);
      opt.zero_grad();
      cross_entropy(ddp->forward(b.x.narrow(0, 4 * g.rank(), 4)), b.y.narrow(0, 4 * g.rank(), 4))
          .backward();
      opt.step();
    }
    return snapshot(*ddp);
  });
  const std::vector<Tensor> want = snapshot(*ref);
  REQUIRE(got[0].size() == want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    INFO("parameter " << k);
    CHECK(equal(got[0][k], got[1][k]));
    check_close(got[0][k], want[k], kiln::testing::tolerance(DType::f32).times(10));
  }
}

TEST_CASE("ddp: a state dict loads with or without DDP's module. prefix") {
  auto got = run_ranks<int>(1, "prefix", [](ProcessGroup& g) {
    std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
    auto source = make_net(1), bare = make_net(2), inner = make_net(3);
    DistributedDataParallel wrapped(inner, group);
    const nn::StateDict with_prefix = DistributedDataParallel(source, group).state_dict();
    if (with_prefix.count("module.0.weight") != 1) throw Error("no module. prefix in a DDP state");
    bare->load_state_dict(with_prefix);             // module.0.weight -> 0.weight
    wrapped.load_state_dict(source->state_dict());  // 0.weight -> module.0.weight
    for (const auto& [k, t] : source->state_dict()) {
      if (!equal(bare->state_dict().at(k), t)) throw Error("bare differs at " + k);
      if (!equal(inner->state_dict().at(k), t)) throw Error("wrapped differs at " + k);
    }
    return 1;
  });
  CHECK(got[0] == 1);
}

namespace {

// Each rank wraps make(rank) in DDP; what each rank's constructor threw, or "no error".
std::vector<std::string> wrap_per_rank(
    int n, const std::function<std::shared_ptr<nn::Module>(int)>& make) {
  return run_ranks<std::string>(
      n, "mismatch",
      [&](ProcessGroup& g) -> std::string {
        std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
        try {
          auto ddp = std::make_shared<DistributedDataParallel>(make(g.rank()), group);
        } catch (const DistError& e) {
          return e.what();
        }
        return "no error";
      },
      std::chrono::seconds(10));
}

std::shared_ptr<nn::Sequential> linears(int count) {
  std::vector<std::shared_ptr<nn::Module>> layers;
  for (int k = 0; k < count; ++k) layers.push_back(std::make_shared<nn::Linear>(4, 4));
  return std::make_shared<nn::Sequential>(layers);
}

}  // namespace

TEST_CASE("ddp: ranks holding different models are refused, naming the first difference") {
  // Before the check, Linear(8, 3 + rank) died inside Gloo: a broadcast of 96 bytes into 128.
  std::vector<std::string> got =
      wrap_per_rank(2, [](int rank) { return std::make_shared<nn::Linear>(8, 3 + rank); });
  INFO(got[0] << "\n" << got[1]);
  CHECK_THAT(got[0], Catch::Contains("rank 0 of 2") &&
                         Catch::Contains("parameter 0 'weight' is [3, 8] f32 on this rank and "
                                         "[4, 8] f32 on rank 1"));
  CHECK_THAT(got[1], Catch::Contains("rank 1 of 2") &&
                         Catch::Contains("parameter 0 'weight' is [4, 8] f32 on this rank and "
                                         "[3, 8] f32 on rank 0"));

  got = wrap_per_rank(2, [](int rank) { return linears(1 + rank); });
  INFO(got[0] << "\n" << got[1]);
  CHECK_THAT(got[0], Catch::Contains("this rank has 2 parameters and 0 buffers, rank 1 has 4 and "
                                     "0; rank 1's parameter 2 ([4, 4] f32) has no counterpart on "
                                     "this rank"));
  CHECK_THAT(got[1], Catch::Contains("this rank has 4 parameters and 0 buffers, rank 0 has 2 and "
                                     "0; parameter 2 '1.weight' ([4, 4] f32) has no counterpart "
                                     "on rank 0"));

  // Three ranks, the last in f64: the two that agree both name it.
  got = wrap_per_rank(3, [](int rank) {
    auto net = linears(1);
    if (rank == 2) net->to(DType::f64);
    return net;
  });
  INFO(got[0] << "\n" << got[1] << "\n" << got[2]);
  for (int r : {0, 1})
    CHECK_THAT(got[r], Catch::Contains("parameter 0 '0.weight' is [4, 4] f32 on this rank and "
                                       "[4, 4] f64 on rank 2"));
  CHECK_THAT(got[2], Catch::Contains("[4, 4] f64 on this rank and [4, 4] f32 on rank 0"));

  // A frozen parameter on one rank changes the buckets: refused too.
  got = wrap_per_rank(2, [](int rank) {
    auto net = linears(1);
    if (rank == 1) net->parameters()[1].requires_grad_(false);
    return net;
  });
  CHECK_THAT(got[1], Catch::Contains("parameter 1 '0.bias' is [4] f32 (frozen) on this rank"));

  // The same conv in two memory formats: the collectives move each weight as the block of memory
  // it fills, so the ranks' orders must agree.
  got = wrap_per_rank(2, [](int rank) {
    auto conv = std::make_shared<nn::Conv2d>(2, 3, 3);
    if (rank == 1) conv->to(MemoryFormat::channels_last);
    return conv;
  });
  CHECK_THAT(got[0], Catch::Contains("parameter 0 'weight' is [3, 2, 3, 3] f32 on this rank and "
                                     "[3, 2, 3, 3] f32 channels-last on rank 1") &&
                         Catch::Contains("memory format"));

  // Alike models pass (their values may differ: rank 0's are broadcast).
  got = wrap_per_rank(3, [](int) { return linears(2); });
  CHECK(got == std::vector<std::string>(3, "no error"));
}

TEST_CASE("ddp: the profiler shows bucket all-reduces, broadcasts and the barrier, with bytes") {
  DDPOptions options;
  options.bucket_cap_mb = 400.0 / (1024 * 1024);  // 400 bytes: the f64 net's 6 tensors in 3
  std::vector<std::shared_ptr<nn::Sequential>> nets = {make_net(1), make_net(2)};
  std::map<std::string, int64_t> bytes_of;
  for (const auto& [name, p] : nets[0]->named_parameters()) bytes_of[name] = p.numel() * 8;

  profiler::Profile prof;
  const auto buckets =
      run_ranks<std::vector<std::vector<std::string>>>(2, "profiled", [&](ProcessGroup& g) {
        std::shared_ptr<ProcessGroup> group(&g, [](ProcessGroup*) {});
        auto ddp = std::make_shared<DistributedDataParallel>(nets[g.rank()], group, options);
        const Batch b = shard(make_batch(0), g.rank(), 2);
        cross_entropy(ddp->forward(b.x), b.y).backward();
        g.barrier();
        return ddp->bucket_names();
      });
  prof.stop();

  std::map<std::string, std::vector<int64_t>> events;  // name -> bytes of each event, sorted
  for (const profiler::Event& e : prof.events()) events[e.name].push_back(e.bytes);
  for (auto& [name, bytes] : events) std::sort(bytes.begin(), bytes.end());

  std::vector<int64_t> bucket_bytes, param_bytes;
  for (int rank = 0; rank < 2; ++rank) {
    for (const auto& bucket : buckets[rank]) {
      int64_t total = 0;
      for (const std::string& name : bucket) total += bytes_of.at(name);
      bucket_bytes.push_back(total);
    }
    for (const auto& [name, bytes] : bytes_of) param_bytes.push_back(bytes);
  }
  std::sort(bucket_bytes.begin(), bucket_bytes.end());
  std::sort(param_bytes.begin(), param_bytes.end());
  REQUIRE(buckets[0].size() > 1);
  CHECK(events["ddp::bucket_all_reduce"] == bucket_bytes);
  CHECK(events["dist::all_reduce"] == bucket_bytes);  // on the group's thread, as it runs
  CHECK(events["dist::broadcast"] == param_bytes);    // rank 0's values at construction
  CHECK(events["dist::barrier"] == std::vector<int64_t>{0, 0});
  CHECK(events["dist::all_gather"].size() == 4);  // the model check: sizes, then descriptions
  const profiler::KeyAverages averages = prof.key_averages();
  CHECK(averages.has_bytes);
  CHECK_THAT(averages.table(), Catch::Contains("data MB"));
}
