// CPU convolution kernels on the layer shapes of ResNet-20 at 28x28 (or ResNet-50 at 224x224):
// forward, input gradient and weight gradient, each as milliseconds per call and GFLOP/s (2 * O *
// C/groups * kH * kW * OH * OW * N flops). Its peer is conv2d_cpu_torch.py (the same shapes through
// PyTorch's oneDNN).
//
//   benchmarks/conv2d_cpu --threads 2 --batch-size 128 --repeats 10
//   benchmarks/conv2d_cpu --isa avx2            # the AVX2 kernels on an AVX-512 machine
//   benchmarks/conv2d_cpu --threads 1 --clock cpu --repeats 30
//   benchmarks/conv2d_cpu --dtype bf16          # what autocast(bf16) runs (AVX512-BF16 kernels)
//   benchmarks/conv2d_cpu --model resnet50 --batch-size 8   # ResNet-50's shapes at 224x224
//   benchmarks/conv2d_cpu --only stage3         # the layers whose name contains "stage3"
//
// --clock cpu times the process's CPU time instead of the wall clock: on one thread of a machine
// that others share, it leaves out the time the process waited for a core (caches still suffer).
#include <omp.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ratio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/kernels/cpu/conv2d/choice.h"
#include "kiln/kernels/cpu/conv2d/onednn.h"
#include "kiln/kiln.h"
#include "kiln/ops/conv.h"
#include "main_guard.h"

using namespace kiln;

namespace {

struct Layer {
  const char* name;
  int64_t in_channels, out_channels, side, kernel, stride, padding;
};

// Every distinct convolution of CIFAR-style ResNet-20 on single-channel 28x28 images.
const Layer kLayers[] = {
    {"stem 1->16 3x3", 1, 16, 28, 3, 1, 1},      {"stage1 16->16 3x3", 16, 16, 28, 3, 1, 1},
    {"down 16->32 3x3/2", 16, 32, 28, 3, 2, 1},  {"short 16->32 1x1/2", 16, 32, 28, 1, 2, 0},
    {"stage2 32->32 3x3", 32, 32, 14, 3, 1, 1},  {"down 32->64 3x3/2", 32, 64, 14, 3, 2, 1},
    {"short 32->64 1x1/2", 32, 64, 14, 1, 2, 0}, {"stage3 64->64 3x3", 64, 64, 7, 3, 1, 1},
};

// The distinct kinds of convolution of torchvision's ResNet-50 (v1.5) on 224x224 images: the
// stem, each stage's 3x3, its 1x1 reduction and expansion, and the strided 3x3 and shortcut of a
// stage's first block.
const Layer kResnet50Layers[] = {
    {"stem 3->64 7x7/2", 3, 64, 224, 7, 2, 3},    {"l1 64->64 1x1", 64, 64, 56, 1, 1, 0},
    {"l1 64->64 3x3", 64, 64, 56, 3, 1, 1},       {"l1 64->256 1x1", 64, 256, 56, 1, 1, 0},
    {"l2 128->128 3x3/2", 128, 128, 56, 3, 2, 1}, {"l2 256->512 1x1/2", 256, 512, 56, 1, 2, 0},
    {"l2 128->128 3x3", 128, 128, 28, 3, 1, 1},   {"l3 256->256 3x3", 256, 256, 14, 3, 1, 1},
    {"l3 1024->256 1x1", 1024, 256, 14, 1, 1, 0}, {"l4 512->512 3x3", 512, 512, 7, 3, 1, 1},
    {"l4 2048->512 1x1", 2048, 512, 7, 1, 1, 0},
};

double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

double wall_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* pass_name(cpu::ConvPass pass) {
  switch (pass) {
    case cpu::ConvPass::forward:
      return "forward";
    case cpu::ConvPass::input_grad:
      return "input grad";
    case cpu::ConvPass::weight_grad:
      return "weight grad";
  }
  return "?";
}

// The autotuner's choices from the `from`-th on: each candidate's best time and the one kept.
void print_choices(size_t from) {
  const std::vector<cpu::Conv2dChoice> choices = cpu::conv2d_choices();
  for (size_t i = from; i < choices.size(); ++i) {
    const cpu::Conv2dChoice& c = choices[i];
    std::printf("    %-11s %s:", pass_name(c.pass), dtype_name(c.dtype));
    for (size_t k = 0; k < c.candidates.size(); ++k)
      std::printf(" %s %.2f ms", cpu::conv2d_impl_name(c.candidates[k]), 1e3 * c.seconds[k]);
    std::printf(" -> %s\n", cpu::conv2d_impl_name(c.kept));
  }
}

template <class F>
double best_ms(int64_t repeats, bool cpu_clock, F&& fn) {
  fn();
  double best = 1e30;
  for (int64_t i = 0; i < repeats; ++i) {
    const double t0 = cpu_clock ? cpu_ms() : wall_ms();
    fn();
    best = std::min(best, (cpu_clock ? cpu_ms() : wall_ms()) - t0);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch_size = 128, repeats = 10;
  int threads = 2;
  std::string isa_name, clock = "wall", dtype_name_arg = "f32", model = "resnet20", only;
  std::string cpu_conv = "autotune";
  CLI::App app{"conv2d_cpu: time of kiln's CPU convolution kernels per ResNet-20 layer"};
  app.add_option("--batch-size", batch_size)->capture_default_str();
  app.add_option("--repeats", repeats, "timed calls per kernel; the fastest is reported")
      ->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--isa", isa_name, "baseline|avx2|avx512|avx512_bf16: at most these kernels");
  app.add_option("--clock", clock, "wall|cpu (the process's CPU time)")
      ->capture_default_str()
      ->check(CLI::IsMember({"wall", "cpu"}));
  app.add_option("--model", model, "resnet20 (28x28) or resnet50 (224x224): whose layers")
      ->capture_default_str()
      ->check(CLI::IsMember({"resnet20", "resnet50"}));
  app.add_option("--dtype", dtype_name_arg, "f32|bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--only", only, "time only the layers whose name contains this text");
  app.add_option("--cpu-conv", cpu_conv,
                 "autotune (time the implementations per shape), rule, onednn, direct, im2col")
      ->capture_default_str()
      ->check(CLI::IsMember({"rule", "autotune", "onednn", "direct", "im2col"}));
  CLI11_PARSE(app, argc, argv);
  return kiln::apps::run_main("conv2d_cpu", [&] {
    omp_set_num_threads(threads);
    // The kernels alone: with grad mode on, oneDNN's forward would keep a copy of x for a weight
    // gradient (backends::onednn_keep_conv_inputs) that the first timed one would read.
    const NoGradGuard kernels_alone;
    if (!isa_name.empty()) set_cpu_isa(parse_cpu_isa(isa_name));
    backends::set_cpu_conv(backends::parse_cpu_conv(cpu_conv));
    manual_seed(0);
    const bool cpu_clock = clock == "cpu";
    const DType dtype = dtype_name_arg == "bf16" ? DType::bf16 : DType::f32;

    std::printf(
        "kiln conv2d, %s, batch %lld, %d threads, %s kernels, conv %s, %s clock: ms per call "
        "(GFLOP/s)\n",
        dtype_name(dtype), static_cast<long long>(batch_size), threads, cpu_isa_name(cpu_isa()),
        cpu_conv.c_str(), clock.c_str());
    std::printf("%-20s %18s %18s %18s\n", "layer", "forward", "input grad", "weight grad");
    double total_ms = 0;
    const bool resnet50 = model == "resnet50";
    for (const Layer& l :
         resnet50 ? std::span<const Layer>(kResnet50Layers) : std::span<const Layer>(kLayers)) {
      if (std::string_view(l.name).find(only) == std::string_view::npos) continue;
      const Pair stride{l.stride, l.stride}, padding{l.padding, l.padding};
      const size_t choices_before = cpu::conv2d_choices().size();
      Tensor x = randn({batch_size, l.in_channels, l.side, l.side}).to(dtype);
      Tensor w = randn({l.out_channels, l.in_channels, l.kernel, l.kernel}).to(dtype);
      Tensor out = conv2d(x, w, Tensor(), stride, padding);
      Tensor grad = randn(out.shape()).to(dtype);
      const double gflop =
          2.0 * static_cast<double>(out.numel() * l.in_channels * l.kernel * l.kernel) / 1e9;
      const double ms[3] = {
          best_ms(repeats, cpu_clock, [&] { conv2d(x, w, Tensor(), stride, padding); }),
          best_ms(repeats, cpu_clock,
                  [&] { conv2d_backward_input(grad, w, x.shape(), stride, padding); }),
          // Each weight gradient as one not preceded by its input gradient: oneDNN's would read
          // the blocked grad_output the call before made (kernels/cpu/conv2d/onednn.h).
          best_ms(repeats, cpu_clock,
                  [&] {
                    cpu::forget_onednn_conv2d_copies();
                    conv2d_backward_weight(grad, x, w.shape(), stride, padding);
                  }),
      };
      std::printf("%-20s", l.name);
      for (double t : ms) {
        std::printf(" %8.2f (%6.1f)", t, gflop / (t / 1e3));
        total_ms += t;
      }
      std::printf("\n");
      print_choices(choices_before);
    }
    std::printf("total: %.1f ms per batch for one call of each kernel on each layer shape\n",
                total_ms);
    return 0;
  });
}
