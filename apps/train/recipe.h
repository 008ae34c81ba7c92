// The training recipe: every knob of kiln-train, its default, and its command-line flag.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <regex>
#include <string>
#include <system_error>

namespace kiln::apps {

// Integer flags checked with messages a person reads ("--epochs: must be at least 1, got -1"),
// where CLI11's own range check prints its bound as a 300-digit number.
inline CLI::Validator integer_in(int64_t low, int64_t high) {
  const std::string bounds =
      high == INT64_MAX ? fmt::format("at least {}", low) : fmt::format("from {} to {}", low, high);
  return CLI::Validator(
      [low, high, bounds](std::string& text) -> std::string {
        int64_t value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error != std::errc() || end != text.data() + text.size())
          return fmt::format("expected a whole number {}, got '{}'", bounds, text);
        if (value < low || value > high) return fmt::format("must be {}, got {}", bounds, text);
        return "";
      },
      bounds == fmt::format("at least {}", low) ? fmt::format(">= {}", low)
                                                : fmt::format("{}..{}", low, high));
}

inline CLI::Validator number_in(double low, double high) {
  return CLI::Validator(
      [low, high](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size())
          return fmt::format("expected a number from {} to {}, got '{}'", low, high, text);
        if (!(value >= low && value <= high))
          return fmt::format("must be from {} to {}, got {}", low, high, text);
        return "";
      },
      fmt::format("{}..{}", low, high));
}

// A finite number of at least `low`: "--lr inf" or "--lr nan" would train to NaN and exit 0.
inline CLI::Validator finite_at_least(double low) {
  return CLI::Validator(
      [low](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value))
          return fmt::format("expected a finite number of at least {}, got '{}'", low, text);
        if (value < low) return fmt::format("must be at least {}, got {}", low, text);
        return "";
      },
      fmt::format(">= {}", low));
}

// --stem auto: the small stem up to this side (CIFAR's 32 pixels, with room for crops and
// resizes), the ImageNet stem above, where the 3x3/1 stem keeps every layer at full resolution
// (ResNet-18 at 224 px: 0.9 against 17.7 images/s on 2 cores, 3.7 against 0.4 GB).
inline constexpr int64_t kSmallStemMaxSide = 64;

// The defaults are the recipe of docs/results.md: CIFAR-style ResNet-20 on Fashion-MNIST, SGD with
// Nesterov momentum and a one-cycle schedule.
struct Recipe {
  std::string model = "resnet20";
  std::string dataset = "fashion-mnist";
  std::string data_dir;
  int64_t synthetic_size = 4096;
  int64_t image_size = 224;  // imagefolder: the side of the training crops and the test centre
  int64_t epochs = 2;
  int64_t batch_size = 128;
  std::string optimizer = "sgd";
  double lr = 0.2;  // the peak rate for onecycle
  double momentum = 0.9;
  bool nesterov = true;
  double weight_decay = 5e-4;
  std::string schedule = "onecycle";
  double label_smoothing = 0.0;
  bool augment = false;
  bool random_erasing = false;
  // The ResNet's first layers: "small" (3x3/1 convolution, for 28-32 px images), "imagenet"
  // (7x7/2 convolution and 3x3/2 max-pool, torchvision's), or "auto": the ImageNet stem for images
  // of more than kSmallStemMaxSide pixels a side (image folders at their default 224), else small.
  std::string stem = "auto";
  uint64_t seed = 0;
  int threads = 0;  // 0: OpenMP's default (all cores)
  int workers = 2;
  bool skip_bad_files = false;  // imagefolder: a file that does not decode is replaced, not fatal
  std::string device = "auto";
  std::string checkpoint_dir;
  std::string resume;       // a checkpoint path, or "last" for <checkpoint-dir>/last.safetensors
  int64_t max_batches = 0;  // per epoch, 0: all (for smoke tests and quick looks)
  int64_t interrupt_after = 0;  // batches, 0: never (a deterministic Ctrl-C, for tests)
  bool distributed = false;     // one rank of a kiln-run / mpirun / srun job
  double dist_timeout = 0;      // seconds a collective may wait, 0: KILN_DIST_TIMEOUT or 600
  std::string amp = "off";      // mixed precision: off, fp16 (with loss scaling) or bf16
  int64_t profile_steps = 0;    // steps to profile after profile_warmup, 0: none
  int64_t profile_warmup = 2;
  bool cuda_graph = false;        // capture the training step as a CUDA graph and replay it
  int64_t cuda_graph_warmup = 3;  // eager steps before the capture
  // How CPU conv2d picks its kernels (backends::CpuConv); empty: KILN_CPU_CONV, else autotune.
  std::string cpu_conv;
};

inline void add_recipe_flags(CLI::App& app, Recipe& r) {
  // Checked here, so that a misspelt choice is a usage error (exit 2) like any other bad flag.
  app.add_option("--model", r.model,
                 "resnet18|resnet34|resnet50|resnet101|resnet20|resnet32|resnet56, or a vision "
                 "transformer: vit-mini|vit-tiny|vit-small|vit-base (patches of 4 pixels up to "
                 "64-pixel images, 16 beyond; usually with --optimizer adamw)")
      ->capture_default_str()
      ->check(
          CLI::IsMember({"resnet18", "resnet34", "resnet50", "resnet101", "resnet20", "resnet32",
                         "resnet56", "vit-mini", "vit-tiny", "vit-small", "vit-base"}));
  app.add_option("--dataset", r.dataset,
                 "fashion-mnist|mnist|cifar10|cifar100|imagefolder|synthetic")
      ->capture_default_str()
      ->check(CLI::IsMember(
          {"fashion-mnist", "mnist", "cifar10", "cifar100", "imagefolder", "synthetic"}));
  app.add_option("--data-dir", r.data_dir,
                 "folder holding the data set's files (MNIST IDX, CIFAR binary, or for "
                 "imagefolder train/<class>/ and val/<class>/ image folders)");
  app.add_option("--image-size", r.image_size,
                 "imagefolder: training crops (RandomResizedCrop + flip; --augment adds "
                 "ColorJitter 0.4) and test centre crops of this side, after resizing the test "
                 "images' shorter side to 256/224 of it")
      ->capture_default_str()
      ->check(integer_in(1, 65535));
  app.add_option("--synthetic-size", r.synthetic_size, "training images of the synthetic data set")
      ->capture_default_str()
      ->check(integer_in(1, 1'000'000'000));
  app.add_option("--epochs", r.epochs, "epochs to train")
      ->capture_default_str()
      ->check(integer_in(1, INT64_MAX));
  app.add_option("--batch-size", r.batch_size, "images per step")
      ->capture_default_str()
      ->check(integer_in(1, INT64_MAX));
  app.add_option("--optimizer", r.optimizer, "sgd|adam|adamw")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--lr", r.lr, "learning rate (the peak rate with --schedule onecycle)")
      ->capture_default_str()
      ->check(finite_at_least(0));
  app.add_option("--momentum", r.momentum,
                 "SGD momentum, for --schedule cosine, step or none: onecycle sets it itself at "
                 "every step (0.95, down to 0.85 at the peak rate, and back, as PyTorch's "
                 "OneCycleLR), so it refuses this flag")
      ->capture_default_str()
      ->check(finite_at_least(0));
  // Two flags rather than CLI11's "--nesterov,!--no-nesterov", whose help reads
  // "--no-nesterov{false}".
  app.add_flag("--nesterov", r.nesterov, "Nesterov momentum for SGD (the default)");
  app.add_flag_callback(
      "--no-nesterov", [&r] { r.nesterov = false; }, "plain momentum for SGD");
  app.add_option("--weight-decay", r.weight_decay, "weight decay")
      ->capture_default_str()
      ->check(finite_at_least(0));
  app.add_option("--schedule", r.schedule, "onecycle|cosine|step|none")
      ->capture_default_str()
      ->check(CLI::IsMember({"onecycle", "cosine", "step", "none"}));
  app.add_option("--label-smoothing", r.label_smoothing, "cross-entropy label smoothing")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0));
  app.add_flag("--augment", r.augment, "random crop (with padding) and horizontal flip");
  app.add_flag("--random-erasing", r.random_erasing, "random erasing after normalisation");
  app.add_option("--stem", r.stem,
                 "auto|small|imagenet: the ResNet's first layers, 3x3/1 for 28-32 px images or "
                 "torchvision's 7x7/2 convolution and max-pool; auto picks imagenet past 64 "
                 "pixels a side")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "small", "imagenet"}));
  app.add_flag_callback(
      "--large-input-stem", [&r] { r.stem = "imagenet"; }, "the same as --stem imagenet");
  app.add_option("--seed", r.seed, "seed for initialisation, shuffling, augmentation and dropout")
      ->capture_default_str();
  app.add_option("--threads", r.threads, "OpenMP threads for the kernels (0: all cores)")
      ->capture_default_str()
      ->check(integer_in(0, 4096));
  app.add_option("--workers", r.workers, "DataLoader worker threads")
      ->capture_default_str()
      ->check(integer_in(0, 4096));
  app.add_flag("--skip-bad-files", r.skip_bad_files,
               "imagefolder: a file that does not open or decode is skipped with a warning naming "
               "it (the next file takes its place), instead of stopping the run");
  app.add_option("--device", r.device, "auto|cpu|cuda|cuda:N")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            const std::regex device("auto|cpu|cuda|cuda:[0-9]{1,5}");
            return std::regex_match(text, device)
                       ? ""
                       : fmt::format("expected auto, cpu, cuda or cuda:N, got '{}'", text);
          },
          "DEVICE"));
  app.add_option("--checkpoint-dir", r.checkpoint_dir,
                 "where last.safetensors, model.safetensors, metrics.csv and curves.png go");
  app.add_option("--max-batches", r.max_batches,
                 "train at most this many batches per epoch (0: all)")
      ->capture_default_str()
      ->check(integer_in(0, INT64_MAX));
  app.add_option("--interrupt-after", r.interrupt_after,
                 "act as if Ctrl-C came after this many batches of this run (0: never; for tests)")
      ->capture_default_str()
      ->check(integer_in(0, INT64_MAX));
  app.add_flag("--distributed", r.distributed,
               "run as one rank of a data-parallel job started by kiln-run, mpirun or srun: gloo "
               "on the CPU, nccl on GPUs (cuda:LOCAL_RANK); --batch-size is per rank; rank 0 "
               "prints and writes the checkpoint directory");
  app.add_option("--dist-timeout", r.dist_timeout,
                 "--distributed: seconds any collective may wait for the other ranks before the "
                 "job stops, naming the ranks that did not answer (0: KILN_DIST_TIMEOUT, or 600)")
      ->capture_default_str()
      ->check(finite_at_least(0));
  app.add_option("--amp", r.amp,
                 "mixed precision: off|fp16|bf16; forward and loss under autocast (weights stay "
                 "f32), fp16 with dynamic loss scaling (GradScaler)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "fp16", "bf16"}));
  app.add_option("--profile-steps", r.profile_steps,
                 "profile this many training steps after --profile-warmup ones: the per-op table "
                 "is printed, and written with trace.json (Chrome/Perfetto) into --checkpoint-dir")
      ->capture_default_str()
      ->check(integer_in(0, INT64_MAX));
  app.add_option("--profile-warmup", r.profile_warmup, "steps before the profiled ones")
      ->capture_default_str()
      ->check(integer_in(0, INT64_MAX));
  app.add_option("--resume", r.resume,
                 "checkpoint to resume from, or 'last' for <checkpoint-dir>/last.safetensors");
  app.add_flag("--cuda-graph", r.cuda_graph,
               "GPU: after --cuda-graph-warmup eager steps, capture the whole training step "
               "(forward, backward, optimizer, loss scaling) once as a CUDA graph and replay it "
               "for every later batch of the full batch size (a last, smaller batch runs "
               "eagerly); not with --distributed or --profile-steps");
  app.add_option("--cpu-conv", r.cpu_conv,
                 "CPU: how conv2d picks its kernels per pass and shape: autotune (time the "
                 "candidates on the first batch, keep the fastest), rule (a fixed choice, the same "
                 "kernels every run), or onednn, direct, im2col (that one wherever it runs); "
                 "default: KILN_CPU_CONV if set, else autotune")
      ->check(CLI::IsMember({"autotune", "rule", "onednn", "direct", "im2col"}));
  app.add_option("--cuda-graph-warmup", r.cuda_graph_warmup,
                 "eager steps before --cuda-graph's capture (they make the optimizer's and the "
                 "loss scaler's state)")
      ->capture_default_str()
      ->check(integer_in(1, INT64_MAX));
}

}  // namespace kiln::apps
