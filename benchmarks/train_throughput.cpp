// Training throughput of a model: images per second over timed steps of forward, backward and an
// update (SGD for the ResNets, AdamW for the ViTs) on synthetic data, after warm-up steps, with
// kiln's peak memory on the device. On the CPU it also splits a step into forward, backward and
// update; on a GPU it times whole steps between two synchronisations, so the host and the GPU
// overlap as in training. Its peer is train_throughput_torch.py (the same model, recipe, batch and
// precision in PyTorch).
//
//   benchmarks/train_throughput --model resnet20 --batch-size 128 --threads 2 --steps 20
//   benchmarks/train_throughput --device cuda --model resnet50 --imagenet --amp bf16
//     --channels-last
//   benchmarks/train_throughput --profile-steps 1   # then where one step's time goes, per op
//   benchmarks/train_throughput --device cuda --cuda-graph   # the step captured, then replayed
//   benchmarks/train_throughput --model vit-mini    # a ViT on 28x28 images, AdamW
//
// With --cuda-graph the warm-up steps run eagerly on a side stream (making the optimizer's and the
// GradScaler's state), the step is captured once as a CUDA graph (core/cuda_graph.h) with the
// capturable SGD and GradScaler, and the timed steps are replays of it: the peer's is
// train_throughput_torch.py --cuda-graph (torch.cuda.graph).
//
// On kiln's CUDA simulator (KILN_CUDA=SIM) the times mean nothing, but the kernel launches and
// library calls per step are counted there and printed; they do not depend on the batch or the
// image size, so `--device cuda --imagenet --side 32 --batch-size 2 --warmup 1 --steps 1` counts
// ResNet-50's ImageNet step; --launches adds where they go, kernel by kernel.
#include <omp.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/cuda_simulated.h"
#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

namespace {

// The process's CPU time: on a machine others share, CPU ms per step over one thread counts
// this process's work without the time it waited for a core.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "resnet20", device_name = "cpu", amp = "off";
  int64_t batch_size = 128, steps = 20, warmup = 3, channels = 1, side = 28, classes = 10;
  int64_t profile_steps = 0, profile_rows = 15;
  int threads = 2;
  bool imagenet = false, tf32 = false, benchmark = false, cuda_graph = false, launches = false;
  bool channels_last = false, no_kept_conv_inputs = false;
  std::string cpu_conv = "autotune";
  CLI::App app{"train_throughput: images/s of training steps"};
  app.add_option("--model", model_name)->capture_default_str();
  app.add_option("--device", device_name, "cpu|cuda|cuda:N")->capture_default_str();
  app.add_option("--batch-size", batch_size)->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--channels", channels)->capture_default_str();
  app.add_option("--side", side, "image height and width")->capture_default_str();
  app.add_option("--classes", classes)->capture_default_str();
  app.add_flag(
      "--imagenet", imagenet,
      "ImageNet shapes: 3x224x224 images (--side changes the 224), 1000 classes, the 7x7/2 "
      "stem and max-pool");
  app.add_option("--amp", amp, "off|fp16|bf16: forward under autocast (fp16 with a GradScaler)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "fp16", "bf16"}));
  app.add_flag("--tf32", tf32,
               "let f32 matmul and conv2d use TF32 tensor cores (as PyTorch's conv)");
  app.add_flag("--channels-last", channels_last,
               "the model and the images in NHWC (torch.channels_last)");
  app.add_flag(
      "--cudnn-benchmark", benchmark,
      "pick cuDNN's convolution algorithms by timing them (torch.backends.cudnn.benchmark)");
  app.add_option("--cpu-conv", cpu_conv,
                 "how CPU conv2d picks its kernels: autotune (time them per shape), rule, "
                 "onednn, direct, im2col (backends::CpuConv)")
      ->capture_default_str()
      ->check(CLI::IsMember({"rule", "autotune", "onednn", "direct", "im2col"}));
  app.add_flag("--no-kept-conv-inputs", no_kept_conv_inputs,
               "oneDNN's forward keeps no copy of x for the weight gradient "
               "(backends::set_onednn_keep_conv_inputs(false)): less memory");
  app.add_option("--profile-steps", profile_steps,
                 "after the timed steps, profile this many more and print the per-op table")
      ->capture_default_str();
  app.add_option("--profile-rows", profile_rows, "rows of that table")->capture_default_str();
  app.add_flag("--cuda-graph", cuda_graph,
               "capture the step as a CUDA graph after the warm-up and time its replays");
  app.add_flag("--launches", launches,
               "on the CUDA simulator, also list a step's launches by kernel and library call");
  CLI11_PARSE(app, argc, argv);
  return kiln::apps::run_main("train_throughput", [&] {
    omp_set_num_threads(threads);
    if (imagenet) {
      channels = 3, classes = 1000;
      if (app.count("--side") == 0) side = 224;
    }
    const Device device = Device::parse(device_name);
    KILN_CHECK(!cuda_graph || (device.is_cuda() && warmup >= 1 && profile_steps == 0), ValueError,
               "--cuda-graph needs --device cuda, at least one --warmup step (it makes the state "
               "the capture needs) and no --profile-steps (a replay runs no op on the host)");
    backends::set_cuda_matmul_allow_tf32(tf32);
    backends::set_cudnn_allow_tf32(tf32);
    backends::set_cudnn_benchmark(benchmark);
    backends::set_cpu_conv(backends::parse_cpu_conv(cpu_conv));
    backends::set_onednn_keep_conv_inputs(!no_kept_conv_inputs);

    manual_seed(0);
    // A ViT trains with AdamW (weight decay 0.05), as its recipes do; the ResNets with SGD.
    const bool vit = nn::is_vit_name(model_name);
    std::shared_ptr<nn::Module> model;
    if (vit)
      model = nn::make_vit(model_name,
                           {.num_classes = classes, .in_channels = channels, .image_size = side});
    else
      model = nn::make_resnet(
          model_name, {.num_classes = classes, .in_channels = channels, .small_input = !imagenet});
    model->to(device);
    const MemoryFormat format =
        channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
    model->to(format);
    std::unique_ptr<optim::Optimizer> optimizer;
    if (vit)
      optimizer = std::make_unique<optim::AdamW>(
          model->parameters(),
          optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.05, .capturable = cuda_graph});
    else
      optimizer = std::make_unique<optim::SGD>(model->parameters(),
                                               optim::SGDOptions{.lr = 0.1,
                                                                 .momentum = 0.9,
                                                                 .weight_decay = 5e-4,
                                                                 .nesterov = true,
                                                                 .capturable = cuda_graph});
    optim::Optimizer& update = *optimizer;
    optim::GradScaler scaler({.enabled = amp == "fp16", .capturable = cuda_graph});
    Tensor x = randn({batch_size, channels, side, side}).to(device).to(format);
    Tensor y = randint(0, classes, {batch_size}).to(device);
    auto sync = [&] {
      if (device.is_cuda()) cuda::synchronize(device.index);
    };

    using clock = std::chrono::steady_clock;
    double forward_s = 0, backward_s = 0, step_s = 0, first_step_s = 0;
    clock::time_point timed_start, timed_end;
    double cpu_start = 0, cpu_end = 0;
    std::optional<profiler::Profile> profile;
    cuda::SimulatedLaunches launches_before, launches_after;
    // --cuda-graph: the warm-up on the capture's stream, then the graph (x and y are static).
    std::optional<cuda::Stream> capture_stream;
    if (cuda_graph) capture_stream = cuda::Stream::create(device.index);
    cuda::CUDAGraph graph;
    auto graph_step = [&] {
      Tensor loss;
      {
        autocast mixed(amp == "bf16" ? DType::bf16 : DType::f16, amp != "off");
        loss = cross_entropy(model->forward(x), y);
      }
      update.zero_grad();
      scaler.scale(loss).backward();
      scaler.step(update);
      scaler.update();
    };
    for (int64_t i = 0; cuda_graph && i < warmup + steps; ++i) {
      if (i == warmup) {
        cuda::current_stream(device.index).wait_stream(*capture_stream);
        graph.capture(graph_step, {.stream = *capture_stream});
        std::printf("captured the step as a CUDA graph of %zu nodes\n", graph.num_nodes());
        sync();
        reset_peak_memory_stats(device);
        launches_before = cuda::simulated_launches();
        timed_start = clock::now();
        cpu_start = cpu_seconds();
      }
      if (i < warmup) {
        const cuda::StreamGuard on_capture_stream(*capture_stream);
        graph_step();
      } else {
        graph.replay();
      }
    }
    for (int64_t i = 0; !cuda_graph && i < warmup + steps + profile_steps; ++i) {
      if (i == warmup + steps) {  // the timed steps are done: the profiled ones follow
        sync();
        launches_after = cuda::simulated_launches();
        timed_end = clock::now();
        cpu_end = cpu_seconds();
        profile.emplace();
      }
      if (i == warmup) {
        sync();
        reset_peak_memory_stats(device);
        launches_before = cuda::simulated_launches();
        timed_start = clock::now();
        cpu_start = cpu_seconds();
      }
      auto t0 = clock::now();
      Tensor loss;
      {
        autocast mixed(amp == "bf16" ? DType::bf16 : DType::f16, amp != "off");
        loss = cross_entropy(model->forward(x), y);
      }
      auto t1 = clock::now();
      update.zero_grad();
      scaler.scale(loss).backward();
      auto t2 = clock::now();
      scaler.step(update);
      scaler.update();
      auto t3 = clock::now();
      if (i == 0) first_step_s = std::chrono::duration<double>(t3 - t0).count();
      if (i < warmup || i >= warmup + steps) continue;
      forward_s += std::chrono::duration<double>(t1 - t0).count();
      backward_s += std::chrono::duration<double>(t2 - t1).count();
      step_s += std::chrono::duration<double>(t3 - t2).count();
    }
    sync();
    if (profile) {
      profile->stop();
    } else {
      launches_after = cuda::simulated_launches();
      timed_end = clock::now();
      cpu_end = cpu_seconds();
    }
    const double total = std::chrono::duration<double>(timed_end - timed_start).count();
    const MemoryStats mem = memory_stats(device);
    std::string precision =
        amp != "off" ? amp + " autocast" : (tf32 ? std::string("f32/tf32") : std::string("f32"));
    if (cuda_graph) precision += " cuda_graph";
    std::printf("kiln %s %s %s batch %lld threads %d: %.1f images/s, %.2f ms/step",
                model_name.c_str(), device.str().c_str(), precision.c_str(),
                static_cast<long long>(batch_size), threads,
                static_cast<double>(batch_size * steps) / total, 1e3 * total / steps);
    // On a GPU the host's phases only queue work: their split says nothing of the GPU's time.
    // The first step includes the CPU autotuner's timing of every convolution shape.
    if (!device.is_cuda())
      std::printf(" (forward %.1f ms, backward %.1f ms, step %.1f ms; first step %.1f ms)",
                  1e3 * forward_s / steps, 1e3 * backward_s / steps, 1e3 * step_s / steps,
                  1e3 * first_step_s);
    std::printf(", cpu %.1f ms/step, peak memory %.1f MiB, %s CPU kernels, conv %s\n",
                1e3 * (cpu_end - cpu_start) / steps,
                static_cast<double>(mem.peak_bytes) / (1 << 20), cpu_isa_name(cpu_isa()),
                cpu_conv.c_str());
    if (no_kept_conv_inputs) std::printf("oneDNN's forward kept no copy of x\n");
    if (device.is_cuda() && cuda::is_simulated())
      std::printf(
          "per step on the CUDA simulator: %.1f kernel launches of kiln and %.1f library calls "
          "(cuBLAS, cuDNN; each at least one kernel on a GPU)\n",
          static_cast<double>(launches_after.kernels - launches_before.kernels) / steps,
          static_cast<double>(launches_after.library_calls - launches_before.library_calls) /
              steps);
    if (launches && device.is_cuda() && cuda::is_simulated()) {
      std::vector<std::pair<std::uint64_t, std::string>> rows;
      for (const auto& [name, after] : launches_after.by_name) {
        const auto before = launches_before.by_name.find(name);
        const std::uint64_t count =
            after - (before == launches_before.by_name.end() ? 0 : before->second);
        if (count > 0) rows.emplace_back(count, name);
      }
      std::sort(rows.rbegin(), rows.rend());
      std::printf("per step, by kernel and library call:\n");
      for (const auto& [count, name] : rows)
        std::printf("%10.1f  %s\n", static_cast<double>(count) / steps, name.c_str());
    }
    if (profile) {
      const profiler::KeyAverages averages = profile->key_averages();
      std::printf("profile of %lld step(s):\n%s", static_cast<long long>(profile_steps),
                  averages
                      .table({.sort_by = averages.has_gpu ? "self_gpu_ms" : "self_host_ms",
                              .row_limit = static_cast<int>(profile_rows)})
                      .c_str());
    }
    return 0;
  });
}
