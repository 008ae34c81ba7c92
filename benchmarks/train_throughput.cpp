// Training throughput of a model on the CPU: images per second over timed steps of forward,
// backward and an SGD update on synthetic data, after warm-up steps, with kiln's peak memory.
// Its peer is train_throughput_torch.py (the same model, recipe and batch in PyTorch).
//
//   benchmarks/train_throughput --model resnet20 --batch-size 128 --threads 2 --steps 20
#include <omp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

int main(int argc, char** argv) {
  std::string model_name = "resnet20";
  int64_t batch_size = 128, steps = 20, warmup = 3, channels = 1, side = 28;
  int threads = 2;
  CLI::App app{"train_throughput: images/s of training steps on the CPU"};
  app.add_option("--model", model_name)->capture_default_str();
  app.add_option("--batch-size", batch_size)->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--channels", channels)->capture_default_str();
  app.add_option("--side", side, "image height and width")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return kiln::apps::run_main("train_throughput", [&] {
    omp_set_num_threads(threads);

    manual_seed(0);
    auto model = nn::make_resnet(model_name, {10, channels, true, false});
    optim::SGD sgd(model->parameters(), {0.1, 0.9, 0.0, 5e-4, true});
    Tensor x = randn({batch_size, channels, side, side});
    Tensor y = randint(0, 10, {batch_size});

    using clock = std::chrono::steady_clock;
    double forward_s = 0, backward_s = 0, step_s = 0;
    reset_peak_memory_stats();
    for (int64_t i = 0; i < warmup + steps; ++i) {
      auto t0 = clock::now();
      Tensor loss = cross_entropy(model->forward(x), y);
      auto t1 = clock::now();
      sgd.zero_grad();
      loss.backward();
      auto t2 = clock::now();
      sgd.step();
      auto t3 = clock::now();
      if (i < warmup) continue;
      forward_s += std::chrono::duration<double>(t1 - t0).count();
      backward_s += std::chrono::duration<double>(t2 - t1).count();
      step_s += std::chrono::duration<double>(t3 - t2).count();
    }
    double total = forward_s + backward_s + step_s;
    MemoryStats mem = memory_stats();
    std::printf(
        "kiln %s batch %lld threads %d: %.1f images/s (forward %.1f ms, backward %.1f ms, step "
        "%.1f "
        "ms per "
        "batch), peak memory %.1f MiB\n",
        model_name.c_str(), static_cast<long long>(batch_size), threads,
        static_cast<double>(batch_size * steps) / total, 1e3 * forward_s / steps,
        1e3 * backward_s / steps, 1e3 * step_s / steps,
        static_cast<double>(mem.peak_bytes) / (1 << 20));
    return 0;
  });
}
