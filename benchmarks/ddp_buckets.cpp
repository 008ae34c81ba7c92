// DDP's buckets, the collectives one training step makes, and a model of data-parallel scaling
// built from them (docs/distributed.md, "Scaling").
//
//   ddp_buckets --model resnet50 --caps 1,5,25,100 --step-ms 84.4 --busbw-gbs 450 --alpha-us 10
//
// For each bucket cap: the buckets DDP packs (DDP's own list, bucket_names(), with each one's
// bytes from its parameters), and the collectives one measured training step made (profiled on a
// process of its own, a group of one over gloo, on a small input: the buckets do not depend on
// the input or the device, CUDA buckets being packed by the same code): DDP's
// ddp::bucket_all_reduce events and the backend's dist::all_reduce events, counted with their
// bytes. Then, for n GPUs, the ring model of docs/distributed.md per bucket,
//
//   T(n, S) = 2 (n - 1) alpha + 2 (n - 1) / n * S / B
//
// summed over the buckets, and the speedup of n GPUs at a fixed batch per GPU over one whose step
// takes --step-ms: with no overlap (every bucket after backward), and with every bucket but the
// last hidden behind backward as far as backward lasts (--backward-share of the step). The step
// time, B (NCCL's bus bandwidth), alpha (its latency per ring step) and the backward share are
// the caller's numbers, printed as given: nothing on this machine measures them.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

namespace {

struct Counted {
  int64_t calls = 0;
  int64_t bytes = 0;
};

int run(int argc, char** argv) {
  CLI::App app{"DDP's buckets and collectives per step, and a ring model of scaling on n GPUs"};
  std::string model_name = "resnet50";
  std::vector<double> caps = {1, 5, 25, 100};
  std::vector<int> gpus = {1, 2, 4, 8};
  int64_t side = 32, batch = 2;
  double step_ms = 0, busbw_gbs = 0, alpha_us = 0, backward_share = 2.0 / 3;
  app.add_option("--model", model_name, "resnet18 ... resnet101, resnet20 ... resnet56")
      ->capture_default_str();
  app.add_option("--caps", caps, "bucket caps, MB (DDPOptions::bucket_cap_mb)")->delimiter(',');
  app.add_option("--side", side,
                 "input side for the profiled step (the buckets do not depend "
                 "on it)")
      ->capture_default_str();
  app.add_option("--batch", batch, "images in the profiled step")->capture_default_str();
  app.add_option("--gpus", gpus, "GPU counts for the model")->delimiter(',');
  app.add_option("--step-ms", step_ms, "the model: one GPU's training step, ms (0: no model)");
  app.add_option("--busbw-gbs", busbw_gbs, "the model: NCCL's bus bandwidth B, GB/s");
  app.add_option("--alpha-us", alpha_us, "the model: latency per ring step, microseconds");
  app.add_option("--backward-share", backward_share,
                 "the model: backward's share of the step, which all buckets but the last can "
                 "hide behind")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  dist::init_process_group("gloo");  // alone: a group of one
  const bool small =
      model_name == "resnet20" || model_name == "resnet32" || model_name == "resnet56";
  std::printf("%s, a group of %d over %s; profiled step: batch %lld of 3x%lldx%lld\n",
              model_name.c_str(), dist::get_world_size(), dist::default_group().backend().c_str(),
              static_cast<long long>(batch), static_cast<long long>(side),
              static_cast<long long>(side));
  const bool model_on = step_ms > 0 && busbw_gbs > 0;
  if (model_on)
    std::printf(
        "model inputs (given, not measured here): one GPU's step %.1f ms, B = %.0f GB/s, "
        "alpha = %.1f us, backward %.0f%% of the step\n",
        step_ms, busbw_gbs, alpha_us, 100 * backward_share);

  for (const double cap : caps) {
    manual_seed(0);
    auto model =
        nn::make_resnet(model_name, {.num_classes = small ? 10 : 1000, .small_input = small});
    std::map<std::string, int64_t> bytes_of;
    for (const auto& [name, p] : model->named_parameters())
      bytes_of[name] = p.numel() * static_cast<int64_t>(dtype_size(p.dtype()));
    auto ddp = std::make_shared<dist::DistributedDataParallel>(
        model, nullptr, dist::DDPOptions{.bucket_cap_mb = cap});
    std::vector<int64_t> buckets;
    for (const auto& names : ddp->bucket_names()) {
      int64_t b = 0;
      for (const std::string& n : names) b += bytes_of.at(n);
      buckets.push_back(b);
    }
    int64_t total = 0;
    for (const int64_t b : buckets) total += b;

    // One step to warm up, one profiled.
    const Tensor x = randn({batch, 3, side, side});
    const Tensor y = zeros({batch}, DType::i64);
    std::map<std::string, Counted> counted;
    for (int step = 0; step < 2; ++step) {
      std::unique_ptr<profiler::Profile> profile;
      if (step == 1) profile = std::make_unique<profiler::Profile>();
      ddp->zero_grad();
      cross_entropy(ddp->forward(x), y).backward();
      if (!profile) continue;
      profile->stop();
      for (const profiler::Event& e : profile->events()) {
        if (e.name != "ddp::bucket_all_reduce" && e.name != "dist::all_reduce") continue;
        counted[e.name].calls += 1;
        counted[e.name].bytes += e.bytes;
      }
    }
    std::printf("\ncap %g MB: %zu buckets, %.2f MB in all; largest %.2f MB, last %.2f MB\n", cap,
                buckets.size(), total / 1e6,
                *std::max_element(buckets.begin(), buckets.end()) / 1e6, buckets.back() / 1e6);
    for (const char* name : {"ddp::bucket_all_reduce", "dist::all_reduce"})
      std::printf("  one step: %lld %s, %.2f MB\n", static_cast<long long>(counted[name].calls),
                  name, counted[name].bytes / 1e6);
    if (!model_on) continue;
    std::printf("  %4s  %10s  %10s  %10s  %14s  %14s\n", "GPUs", "comm ms", "last ms", "exposed ms",
                "speedup, none", "speedup, some");
    for (const int n : gpus) {
      auto ring_ms = [&](int64_t bytes) {
        if (n == 1) return 0.0;
        return 2.0 * (n - 1) * alpha_us * 1e-3 +
               2.0 * (n - 1) / n * static_cast<double>(bytes) / (busbw_gbs * 1e9) * 1e3;
      };
      double comm = 0;
      for (const int64_t b : buckets) comm += ring_ms(b);
      const double last = ring_ms(buckets.back());
      const double exposed = last + std::max(0.0, comm - last - backward_share * step_ms);
      std::printf("  %4d  %10.3f  %10.3f  %10.3f  %13.2fx  %13.2fx\n", n, comm, last, exposed,
                  n * step_ms / (step_ms + comm), n * step_ms / (step_ms + exposed));
    }
    // What a speedup of 3.3 on 4 GPUs (the guides' figure) asks of B with no overlap.
    const double allowed_ms = step_ms * (4 / 3.3 - 1);
    const double latency_ms = static_cast<double>(buckets.size()) * 2 * 3 * alpha_us * 1e-3;
    if (allowed_ms > latency_ms)
      std::printf(
          "  3.3x on 4 GPUs with no overlap needs B >= %.1f GB/s (%.1f ms of "
          "communication a step)\n",
          2.0 * 3 / 4 * static_cast<double>(total) / ((allowed_ms - latency_ms) * 1e-3) / 1e9,
          allowed_ms);
  }
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::apps::run_main("ddp_buckets", [&] { return run(argc, argv); });
}
