// kiln-train: trains a ResNet or a vision transformer (any model make_resnet or make_vit knows) on
// Fashion-MNIST, MNIST, CIFAR, a folder of images or a synthetic set, on the best device present,
// with checkpoints, resume, metrics and a progress bar.
//
//   kiln-train --model resnet20 --dataset fashion-mnist --epochs 2 --batch-size 128 --device cpu
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "command_line.h"
#include "kiln/data/cifar.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/idx.h"
#include "kiln/data/image/folder.h"
#include "kiln/data/sampler.h"
#include "kiln/data/synthetic.h"
#include "kiln/dist/ddp.h"
#include "kiln/dist/process_group.h"
#include "kiln/kiln.h"
#include "kiln/nn/loss.h"
#include "kiln/nn/resnet.h"
#include "kiln/nn/vit.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"
#include "kiln/train/checkpoint.h"
#include "main_guard.h"
#include "optimizer.h"
#include "plot.h"
#include "progress.h"
#include "recipe.h"
#include "resume.h"
#include "run_dir.h"
#include "step_profile.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

// The signal that asked the run to stop (SIGINT: Ctrl-C; SIGTERM: what kiln-run, schedulers and
// `kill` send), 0 until one came: either saves a resumable checkpoint and exits 128 + the signal.
std::atomic<int> interrupted_by{0};
void on_stop_signal(int signal) {
  interrupted_by = signal;
}

struct Split {
  std::shared_ptr<const data::Dataset> train, test;
  int64_t channels, classes;
  std::vector<double> mean, std;
  bool photos = false;  // images of any size (ImageFolder): the ImageNet recipe's transforms
  // An image folder's class names in label order; a built-in data set's labels are its format's.
  std::vector<std::string> class_names = {};
};

// DIR/train and DIR/val, one ImageFolder each; both must have the same classes, so that a label
// means one class in both.
Split load_image_folders(const apps::Recipe& r) {
  KILN_CHECK(!r.data_dir.empty(), ValueError,
             "--dataset imagefolder needs --data-dir DIR holding DIR/train/<class>/ and "
             "DIR/val/<class>/");
  const data::ImageFolderOptions options{.skip_bad_files = r.skip_bad_files};
  auto train =
      std::make_shared<data::ImageFolder>((fs::path(r.data_dir) / "train").string(), options);
  auto val = std::make_shared<data::ImageFolder>((fs::path(r.data_dir) / "val").string(), options);
  KILN_CHECK(train->classes() == val->classes(), ValueError,
             "{}: train/ has the classes [{}] but val/ has [{}]: both need the same class folders",
             r.data_dir, fmt::join(train->classes(), ", "), fmt::join(val->classes(), ", "));
  if (train->classes().size() == 1)
    std::fprintf(stderr,
                 "kiln-train: warning: %s/train holds one class folder (%s): every label is 0, so "
                 "the loss falls to 0 without the model learning anything\n",
                 r.data_dir.c_str(), train->classes().front().c_str());
  // ImageNet's statistics, as torchvision's recipes normalise with.
  return {train,
          val,
          3,
          static_cast<int64_t>(train->classes().size()),
          {0.485, 0.456, 0.406},
          {0.229, 0.224, 0.225},
          true,
          train->classes()};
}

Split load_data(const apps::Recipe& r) {
  if (r.dataset == "fashion-mnist" || r.dataset == "mnist") {
    std::string root = r.data_dir.empty()
                           ? (r.dataset == "mnist" ? "/usr/share/datasets/mnist"
                                                   : "/usr/share/datasets/fashion-mnist")
                           : r.data_dir;
    bool fashion = r.dataset == "fashion-mnist";
    auto make = [&](bool train) -> std::shared_ptr<const data::Dataset> {
      return std::make_shared<data::MnistDataset>(fashion ? data::MnistDataset::fashion(root, train)
                                                          : data::MnistDataset::mnist(root, train));
    };
    // Per-channel statistics of the training images, as the usual torchvision recipes use.
    return fashion ? Split{make(true), make(false), 1, 10, {0.2860}, {0.3530}}
                   : Split{make(true), make(false), 1, 10, {0.1307}, {0.3081}};
  }
  if (r.dataset == "cifar10" || r.dataset == "cifar100") {
    int variant = r.dataset == "cifar10" ? 10 : 100;
    KILN_CHECK(!r.data_dir.empty(), ValueError, "kiln-train: --data-dir is required for {}",
               r.dataset);
    auto train = std::make_shared<data::CifarDataset>(
        data::CifarDataset::from_root(r.data_dir, true, variant));
    auto test = std::make_shared<data::CifarDataset>(
        data::CifarDataset::from_root(r.data_dir, false, variant));
    return {train, test, 3, variant, {0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}};
  }
  if (r.dataset == "imagefolder") return load_image_folders(r);
  if (r.dataset == "synthetic") {
    auto train =
        std::make_shared<data::SyntheticDataset>(r.synthetic_size, Shape{1, 28, 28}, 10, 1);
    // A quarter as many test images, and at least one (--synthetic-size 1 once evaluated none).
    auto test = std::make_shared<data::SyntheticDataset>(std::max<int64_t>(1, r.synthetic_size / 4),
                                                         Shape{1, 28, 28}, 10, 2);
    return {train, test, 1, 10, {0.5}, {0.29}};
  }
  throw ValueError(
      fmt::format("kiln-train: unknown dataset '{}' (expected fashion-mnist, mnist, cifar10, "
                  "cifar100, imagefolder or synthetic)",
                  r.dataset));
}

// "auto" is the best device present: the first GPU when kiln was built with CUDA and one is
// visible, else the CPU.
Device pick_device(const std::string& name) {
  if (name != "auto") return Device::parse(name);
  return cuda::is_available() ? Device::cuda(0) : Device::cpu();
}

// Training and test images must have one shape: a model trained on one size says nothing useful
// (or fails late) on another.
void check_image_shapes(const Split& split) {
  if (split.photos || split.train->size() == 0 || split.test->size() == 0) return;
  const Shape train = split.train->get(0)[0].shape(), test = split.test->get(0)[0].shape();
  KILN_CHECK(train == test, ShapeError,
             "the test images are {} but the training images {}: both splits must hold images "
             "of one size",
             shape_str(test), shape_str(train));
}

struct EpochStats {
  double loss = 0, accuracy = 0, seconds = 0, images_per_second = 0;
  double top5 = 0;  // the fraction whose label is among the 5 largest logits
};

// How many rows of logits [N, C] have their label among their 5 largest (all of them below 5
// classes), as torchvision's reference scripts count top-5: by topk, ties to the earlier class.
int64_t top5_correct(const Tensor& logits, const Tensor& labels) {
  const Tensor best = topk(logits.detach(), std::min<int64_t>(5, logits.size(1)), 1).indices;
  return any(eq(best, labels.view({-1, 1})), {1}).sum().item<int64_t>();
}

// The 16-bit type of --amp (f16 when it is off: autocast then runs disabled).
DType amp_dtype(const apps::Recipe& r) {
  return r.amp == "bf16" ? DType::bf16 : DType::f16;
}

EpochStats evaluate(nn::Module& model, const data::Dataset& dataset,
                    const data::Transform& transform, Device device, const apps::Recipe& r) {
  profiler::RecordFunction range("evaluate");
  NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(
      std::shared_ptr<const data::Dataset>(&dataset, [](const data::Dataset*) {}), transform,
      {.batch_size = 500, .num_workers = 1, .pin_memory = device.is_cuda()});
  double loss_sum = 0;
  int64_t correct = 0, correct5 = 0, seen = 0;
  for (data::Batch& batch : loader) {
    // Pinned batches (on a GPU) copy without making the host wait for the GPU.
    Tensor x = batch[0].to(device, true), y = batch[1].to(device, true);
    autocast amp(amp_dtype(r), r.amp != "off");
    Tensor logits = model.forward(x);
    loss_sum += cross_entropy(logits, y, Tensor(), -100, Reduction::sum).item<double>();
    correct += sum(eq(argmax(logits, 1), y)).item<int64_t>();
    correct5 += top5_correct(logits, y);
    seen += x.size(0);
  }
  model.train();
  KILN_CHECK(seen > 0, ValueError, "kiln-train: the test set of --dataset {} holds no images",
             r.dataset);
  return {loss_sum / static_cast<double>(seen),
          static_cast<double>(correct) / static_cast<double>(seen), 0, 0,
          static_cast<double>(correct5) / static_cast<double>(seen)};
}

// --cuda-graph's limits, checked before any data is read: a graph needs a GPU, and holds neither
// a collective (DDP) nor the profiler's per-op events.
void check_cuda_graph_recipe(const apps::Recipe& r, Device device) {
  if (!r.cuda_graph) return;
  KILN_CHECK(device.is_cuda(), ValueError,
             "kiln-train: --cuda-graph captures the training step as a CUDA graph, which needs a "
             "GPU, but the device is {}{}",
             device.str(),
             cuda::is_available() ? "" : " (no GPU is visible, or kiln was built without CUDA)");
  KILN_CHECK(!r.distributed, ValueError,
             "kiln-train: --cuda-graph cannot capture --distributed training: DDP's gradient "
             "all-reduces are not capturable in kiln");
  KILN_CHECK(r.profile_steps == 0, ValueError,
             "kiln-train: --cuda-graph and --profile-steps do not go together: the profiler times "
             "the ops of a step, and a replayed step runs none on the host");
}

// --cuda-graph: the training step captured once with static inputs, then replayed (core/
// cuda_graph.h). Warm-up steps run eagerly on the capture's stream first, so that the optimizer's
// state and the GradScaler's device state exist before the capture.
struct GraphedStep {
  explicit GraphedStep(const cuda::Stream& capture_stream) : stream(capture_stream) {}
  cuda::Stream stream;
  cuda::CUDAGraph graph;
  Tensor x, y, logits, loss;  // the static inputs and outputs
  int64_t eager_steps = 0;
};

// --stem auto resolved for training images of `side` pixels; a small stem asked for on large
// images is warned about, once, on stderr.
std::string pick_stem(const std::string& asked, int64_t side) {
  if (asked == "auto") return side > apps::kSmallStemMaxSide ? "imagenet" : "small";
  if (asked == "small" && side > apps::kSmallStemMaxSide)
    std::fprintf(stderr,
                 "kiln-train: warning: --stem small on %lld-pixel images keeps every layer at full "
                 "resolution (ResNet-18 at 224 pixels: about 20 times the time and 9 times the "
                 "memory of --stem imagenet, torchvision's stem, which --stem auto picks past %lld "
                 "pixels)\n",
                 static_cast<long long>(side), static_cast<long long>(apps::kSmallStemMaxSide));
  return asked;
}

apps::Recipe recipe_with_stem(apps::Recipe r, const std::string& stem) {
  r.stem = stem;
  return r;
}

// A non-finite training loss without loss scaling: the weights the next step would make are NaN,
// so the run stops here, before any checkpoint of them, with what to do next.
[[noreturn]] void stop_diverged(double loss, int64_t epoch, int64_t step,
                                const optim::Optimizer& optimizer, const std::string& last_path) {
  const std::string kept = !last_path.empty() && fs::exists(last_path)
                               ? fmt::format("{} is kept as it was saved", last_path)
                               : std::string("no checkpoint was written");
  throw ValueError(fmt::format(
      "kiln-train: the training loss is {} at epoch {}, batch {} (lr {:g}): training diverged and "
      "stopped; {}. Lower --lr (or train with --amp fp16, whose loss scaling skips such steps)",
      std::isnan(loss) ? "NaN"
      : loss > 0       ? "+inf"
                       : "-inf",
      epoch + 1, step, optimizer.lr(0), kept));
}

// A file of the image folder that did not open or decode, mid-epoch: the batches before it are
// saved (the caller did), so that fixing the file and resuming loses nothing.
[[noreturn]] void throw_bad_file(const data::ImageDecodeError& e, int64_t epoch, int64_t step,
                                 const std::string& saved, bool skipping) {
  const std::string kept =
      saved.empty() ? std::string("nothing was saved (no --checkpoint-dir, or not rank 0)")
                    : fmt::format(
                          "the {} batches of this epoch before it are saved in {}; fix or "
                          "remove the file and continue with --resume last",
                          step, saved);
  throw Error(fmt::format(
      "{}; the run stopped at epoch {}, batch {}: {}{}", e.what(), epoch + 1, step + 1, kept,
      skipping ? std::string() : " (or add --skip-bad-files to train on without such files)"));
}

// --momentum where nothing would read it: the one-cycle schedule sets SGD's momentum at every step,
// and Adam and AdamW have none (their beta1 plays its part).
void check_momentum_flag(const apps::Recipe& r, bool given) {
  if (!given) return;
  KILN_CHECK(r.optimizer == "sgd", ValueError,
             "kiln-train: --momentum is SGD's; --optimizer {} has none (its beta1 is 0.9)",
             r.optimizer);
  KILN_CHECK(r.schedule != "onecycle", ValueError,
             "kiln-train: --momentum does nothing under --schedule onecycle, which sets the "
             "momentum at every step (0.95, down to 0.85 at the peak rate, and back); choose "
             "--schedule cosine, step or none to set it");
}

int run_training(const apps::Recipe& r) {
  if (r.threads > 0) omp_set_num_threads(r.threads);
  // Autotuned unless the flag or KILN_CPU_CONV (which the tests set to rule) says otherwise.
  const char* cpu_conv_env = std::getenv("KILN_CPU_CONV");
  if (!r.cpu_conv.empty())
    backends::set_cpu_conv(backends::parse_cpu_conv(r.cpu_conv));
  else if (cpu_conv_env == nullptr || *cpu_conv_env == '\0')
    backends::set_cpu_conv(backends::CpuConv::autotune);
  manual_seed(r.seed);
  Device device = pick_device(r.device);
  check_cuda_graph_recipe(r, device);
  if (r.distributed) {
    dist::ProcessGroupOptions options;
    if (r.dist_timeout > 0)
      options.timeout = std::chrono::milliseconds(std::llround(r.dist_timeout * 1000));
    dist::init_process_group(device.is_cuda() ? "nccl" : "gloo", options);
    // init_process_group made the rank's GPU current (dist::local_device).
    if (device.is_cuda()) device = Device::cuda(cuda::current_device());
  }
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const bool lead = rank == 0;  // prints, and owns the checkpoint directory
  Split split = load_data(r);
  check_image_shapes(split);
  {
    data::Transform eval_transform =
        data::compose({data::to_float(), data::normalize(split.mean, split.std)});
    std::vector<data::Transform> train_steps = {data::to_float()};
    // ImageNet's recipe scaled to --image-size: a random crop of 8-100% of the image resized to
    // the size, and a flip, for training; the shorter side resized to 256/224 of it, then the
    // centre, for evaluation.
    const auto eval_resize = static_cast<int64_t>(std::lround(r.image_size * 256.0 / 224.0));
    if (split.photos) {
      eval_transform = data::compose({data::resize(eval_resize), data::center_crop(r.image_size),
                                      data::to_float(), data::normalize(split.mean, split.std)});
      train_steps = {data::random_resized_crop(r.image_size), data::random_horizontal_flip()};
      if (r.augment) train_steps.push_back(data::color_jitter(0.4, 0.4, 0.4));
      train_steps.push_back(data::to_float());
    } else if (r.augment) {
      int64_t side = split.train->get(0)[0].size(-1);
      train_steps.push_back(
          data::random_crop(side, r.dataset == "cifar10" || r.dataset == "cifar100" ? 4 : 2));
      train_steps.push_back(data::random_horizontal_flip());
    }
    train_steps.push_back(data::normalize(split.mean, split.std));
    if (r.random_erasing) train_steps.push_back(data::random_erasing());
    // In a job, every rank shuffles alike and takes its own share (DistributedSampler).
    std::shared_ptr<const data::Sampler> sampler;
    if (r.distributed)
      sampler = std::make_shared<data::DistributedSampler>(
          world, rank, data::DistributedSamplerOptions{.shuffle = true, .seed = r.seed});
    data::DataLoader loader(split.train, data::compose(train_steps),
                            {.batch_size = r.batch_size,
                             .shuffle = !r.distributed,
                             .seed = r.seed,
                             .drop_last = false,
                             .num_workers = r.workers,
                             .pin_memory = device.is_cuda(),
                             .sampler = sampler});

    const int64_t side = split.photos ? r.image_size : split.train->get(0)[0].size(-1);
    const bool vit = nn::is_vit_name(r.model);
    KILN_CHECK(!vit || r.stem == "auto", ValueError,
               "kiln-train: --stem is a ResNet's; --model {} cuts the images into patches",
               r.model);
    const std::string stem = vit ? "patches" : pick_stem(r.stem, side);
    std::shared_ptr<nn::Module> model;
    if (vit)
      model = nn::make_vit(
          r.model,
          {.num_classes = split.classes, .in_channels = split.channels, .image_size = side});
    else
      model = nn::make_resnet(r.model, {.num_classes = split.classes,
                                        .in_channels = split.channels,
                                        .small_input = stem == "small"});
    model->to(device);
    // A graph holds only capturable optimizers and loss scaling: their decisions stay on the GPU.
    std::unique_ptr<optim::Optimizer> optimizer = apps::make_optimizer(r, model->parameters());

    const int64_t steps_per_epoch =
        r.max_batches > 0 ? std::min(r.max_batches, loader.num_batches()) : loader.num_batches();
    std::unique_ptr<optim::LRScheduler> scheduler;
    bool per_batch_schedule = true;
    const int64_t total_steps = steps_per_epoch * r.epochs;
    if (r.schedule == "onecycle" && total_steps < 2) {
      // One step has no warm-up and no annealing to do.
      std::printf("one-cycle schedule over %lld step: training at a constant lr %g instead\n",
                  static_cast<long long>(total_steps), r.lr);
    } else if (r.schedule == "onecycle") {
      scheduler = std::make_unique<optim::OneCycleLR>(*optimizer, r.lr, total_steps);
    } else if (r.schedule == "cosine") {
      scheduler =
          std::make_unique<optim::CosineAnnealingLR>(*optimizer, steps_per_epoch * r.epochs);
    } else if (r.schedule == "step") {
      scheduler =
          std::make_unique<optim::StepLR>(*optimizer, std::max<int64_t>(1, r.epochs / 3), 0.1);
      per_batch_schedule = false;
    }

    // f16's range needs the loss scaled (PyTorch's dynamic scaling); bf16 has f32's range.
    optim::GradScaler scaler({.enabled = r.amp == "fp16", .capturable = r.cuda_graph});
    train::TrainingState state{
        .model = model.get(),
        .optimizer = optimizer.get(),
        .scheduler = scheduler.get(),
        .generator = &default_generator(),
        .scaler = scaler.is_enabled() ? &scaler : nullptr,
        .recipe = apps::recipe_metadata(recipe_with_stem(r, stem), world, split.class_names)};
    const apps::RunDir run_dir(lead ? r.checkpoint_dir : "");
    const std::string last_path =
        r.checkpoint_dir.empty() ? "" : apps::RunDir::path_in(r.checkpoint_dir, "last.safetensors");
    if (!r.resume.empty()) {
      std::string path = r.resume == "last" ? last_path : r.resume;
      KILN_CHECK(!path.empty(), ValueError, "--resume last needs --checkpoint-dir");
      const std::vector<std::string> notes =
          apps::check_resume_recipe(path, train::training_checkpoint_recipe(path), state.recipe);
      // The saved place against this run's length before anything is loaded: fewer --epochs
      // than the checkpoint has done is refused here, naming them.
      const train::TrainingCheckpointPlace place = train::training_checkpoint_place(path);
      const apps::RunLength run{.epochs = r.epochs,
                                .steps_per_epoch = steps_per_epoch,
                                .scheduled = scheduler != nullptr,
                                .per_batch_schedule = per_batch_schedule};
      apps::check_resume_position(path, place.position,
                                  scheduler ? place.scheduler_step : std::nullopt, run);
      const train::TrainingPosition p = train::load_training_checkpoint(path, state);
      apps::check_finite_model(path, *model);
      // The optimizer's options are the checkpoint's now: this run's go back in, so that each
      // change printed below is one the run makes.
      apps::apply_recipe_options(*optimizer, r, scheduler != nullptr,
                                 scheduler != nullptr && r.schedule == "onecycle");
      for (const std::string& note : notes)
        if (lead) std::printf("%s\n", note.c_str());
      run_dir.drop_metrics_after(p.epoch);
      std::printf("resumed from %s at epoch %lld, batch %lld\n", path.c_str(),
                  static_cast<long long>(p.epoch + 1), static_cast<long long>(p.batch_in_epoch));
    }
    auto save = [&]() {
      if (last_path.empty() || !lead) return;
      train::save_training_checkpoint(last_path, state);
    };
    // The model the steps run: in a job, wrapped by DDP (made after a resume, so every rank starts
    // from rank 0's weights either way); checkpoints hold the bare model's state.
    std::shared_ptr<nn::Module> trained = model;
    if (r.distributed) trained = std::make_shared<dist::DistributedDataParallel>(model);

    if (lead && r.distributed)
      std::printf("kiln-train: rank 0 of %d (%s), batch %lld per rank\n", world,
                  dist::default_group().backend().c_str(), static_cast<long long>(r.batch_size));
    if (lead)
      std::printf(
          "kiln-train: %s on %s (%lld train / %lld test images), %s, batch %lld, %lld epochs, "
          "device %s, %d threads, amp %s\n",
          r.model.c_str(), r.dataset.c_str(), static_cast<long long>(split.train->size()),
          static_cast<long long>(split.test->size()), r.optimizer.c_str(),
          static_cast<long long>(r.batch_size), static_cast<long long>(r.epochs),
          device.str().c_str(), omp_get_max_threads(), r.amp.c_str());
    if (lead && split.photos)
      std::printf(
          "images: %lld classes; training on random %lld-pixel crops, testing on the %lld-pixel "
          "centre of each image resized to %lld\n",
          static_cast<long long>(split.classes), static_cast<long long>(r.image_size),
          static_cast<long long>(r.image_size), static_cast<long long>(eval_resize));
    // Installed before the line below, which tells a watcher that a signal is now a clean stop.
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    if (lead)
      std::printf("%lld parameters, %s\n", static_cast<long long>(model->parameter_count()),
                  vit               ? "a vision transformer on patches of the images"
                  : stem == "small" ? "the small (3x3/1) stem"
                                    : "the ImageNet (7x7/2 and max-pool) stem");
    nn::CrossEntropyLoss criterion({.label_smoothing = r.label_smoothing});

    apps::StepProfile step_profile(r.profile_warmup, r.profile_steps, r.checkpoint_dir, lead);
    // One training step: the logits and the loss of a batch, after backward and the update.
    auto train_step = [&](const Tensor& x, const Tensor& y) {
      Tensor logits, loss;
      {
        profiler::RecordFunction range("forward");
        autocast amp(amp_dtype(r), r.amp != "off");
        logits = trained->forward(x);
        loss = criterion(logits, y);
      }
      {
        profiler::RecordFunction range("backward");
        optimizer->zero_grad();
        scaler.scale(loss).backward();
      }
      {
        profiler::RecordFunction range("optimizer");
        scaler.step(*optimizer);
        scaler.update();
      }
      return std::make_pair(logits, loss);
    };
    std::optional<GraphedStep> graphed;
    if (r.cuda_graph) graphed.emplace(cuda::Stream::create(device.index));
    // The step for one batch: eager, or with --cuda-graph the replay of the captured step once
    // the warm-up is done (a batch of another size, the last one, runs eagerly).
    auto run_step = [&](const Tensor& x, const Tensor& y) {
      if (!graphed) return train_step(x, y);
      GraphedStep& g = *graphed;
      const bool full = x.size(0) == r.batch_size;
      if (g.eager_steps < r.cuda_graph_warmup || !full) {
        // On the capture's stream, after the batch's copies on the current one.
        const cuda::Stream current = cuda::current_stream(device.index);
        g.stream.wait_stream(current);
        std::pair<Tensor, Tensor> out;
        {
          const cuda::StreamGuard on_capture_stream(g.stream);
          out = train_step(x, y);
        }
        current.wait_stream(g.stream);
        ++g.eager_steps;
        return out;
      }
      if (!g.graph.has_graph()) {
        g.x = empty_like(x);
        g.y = empty_like(y);
        g.graph.capture([&] { std::tie(g.logits, g.loss) = train_step(g.x, g.y); },
                        {.stream = g.stream});
        if (lead)
          std::printf("captured the training step as a CUDA graph of %zu nodes\n",
                      g.graph.num_nodes());
      }
      g.x.copy_(x);
      g.y.copy_(y);
      g.graph.replay();
      return std::make_pair(g.logits, g.loss);
    };
    EpochStats test;
    // Top-5 for image folders, where ImageNet's recipe reports it, and only past 5 classes: with
    // 5 or fewer every label is among the top 5.
    const bool show_top5 = split.photos && split.classes > 5;
    const int64_t first_epoch = state.position.epoch;
    int64_t trained_here = 0;  // batches this process ran, for --interrupt-after
    for (int64_t epoch = state.position.epoch; epoch < r.epochs; ++epoch) {
      model->train();
      loader.set_epoch(epoch);
      apps::ProgressBar bar(fmt::format("epoch {}/{}", epoch + 1, r.epochs), steps_per_epoch, lead);
      double loss_sum = 0;
      // loss_seen: the images of batches with a finite loss (under fp16 loss scaling, a batch
      // whose loss overflowed is a skipped step, left out of the epoch's mean).
      int64_t correct = 0, seen = 0, loss_seen = 0, step = 0;
      const int64_t skip = state.position.batch_in_epoch;  // a resumed epoch skips what it had done
      try {
        for (data::Batch& batch : loader) {
          if (step >= steps_per_epoch) break;
          if (step < skip) {
            ++step;
            continue;
          }
          step_profile.before_step(trained_here);
          Tensor x = batch[0].to(device, true), y = batch[1].to(device, true);
          const auto [logits, loss] = run_step(x, y);
          if (scheduler && per_batch_schedule &&
              state.position.global_step + 1 < steps_per_epoch * r.epochs)
            scheduler->step();
          ++step;
          ++state.position.global_step;
          state.position.batch_in_epoch = step;
          const double batch_loss = loss.item<double>();
          if (std::isfinite(batch_loss)) {
            loss_sum += batch_loss * static_cast<double>(x.size(0));
            loss_seen += x.size(0);
          } else if (!scaler.is_enabled()) {
            stop_diverged(batch_loss, epoch, step, *optimizer, last_path);
          }
          correct += sum(eq(argmax(logits.detach(), 1), y)).item<int64_t>();
          seen += x.size(0);
          bar.update(step, loss_seen ? loss_sum / static_cast<double>(loss_seen) : 0.0,
                     static_cast<double>(correct) / static_cast<double>(seen), seen);
          step_profile.after_step(trained_here);
          ++trained_here;
          if (interrupted_by != 0 || trained_here == r.interrupt_after) {
            bar.finish();
            save();
            if (lead)  // the only process that writes the checkpoint
              std::printf("interrupted at epoch %lld, batch %lld: checkpoint saved to %s\n",
                          static_cast<long long>(epoch + 1), static_cast<long long>(step),
                          last_path.empty() ? "(nowhere: no --checkpoint-dir)" : last_path.c_str());
            return interrupted_by != 0 ? 128 + interrupted_by : apps::kExitInterrupted;
          }
        }
      } catch (const data::ImageDecodeError& e) {
        bar.finish();
        save();
        throw_bad_file(e, epoch, step, lead ? last_path : std::string(), r.skip_bad_files);
      }
      step_profile.end_of_epoch();
      if (r.distributed) {  // the epoch's figures over every rank's share
        Tensor totals = tensor({loss_sum, static_cast<double>(correct), static_cast<double>(seen),
                                static_cast<double>(loss_seen)})
                            .to(device);
        dist::all_reduce(totals);
        const std::vector<double> t = totals.cpu().tolist();
        loss_sum = t[0], correct = static_cast<int64_t>(t[1]), seen = static_cast<int64_t>(t[2]);
        loss_seen = static_cast<int64_t>(t[3]);
      }
      EpochStats train;
      train.seconds = bar.finish();
      train.loss = loss_seen ? loss_sum / static_cast<double>(loss_seen) : 0.0;
      train.accuracy = seen ? static_cast<double>(correct) / static_cast<double>(seen) : 0.0;
      train.images_per_second = static_cast<double>(seen) / train.seconds;
      if (scheduler && !per_batch_schedule) scheduler->step();
      test = evaluate(*model, *split.test, eval_transform, device, r);
      const double lr = optimizer->lr(0);
      const std::string top5 =
          show_top5 ? fmt::format(" top-5 {:.2f}%", 100 * test.top5) : std::string();
      if (lead)
        std::printf(
            "epoch %lld: train loss %.4f acc %.2f%% | test loss %.4f acc %.2f%%%s | %.0f img/s, "
            "%.1f s\n",
            static_cast<long long>(epoch + 1), train.loss, 100 * train.accuracy, test.loss,
            100 * test.accuracy, top5.c_str(), train.images_per_second, train.seconds);
      // The row goes first: a run killed before the checkpoint below redoes this epoch, and
      // resuming drops the row (RunDir::drop_metrics_after); the other order lost it for good.
      run_dir.append_metrics({.epoch = epoch + 1,
                              .train_loss = train.loss,
                              .train_accuracy = train.accuracy,
                              .test_loss = test.loss,
                              .test_accuracy = test.accuracy,
                              .lr = lr,
                              .images_per_second = train.images_per_second,
                              .seconds = train.seconds,
                              .test_top5_accuracy = show_top5 ? test.top5 : -1.0});
      state.position.epoch = epoch + 1;
      state.position.batch_in_epoch = 0;
      save();
      if (run_dir.enabled() && apps::plot_metrics(run_dir.dir(), run_dir.metrics_rows()))
        std::printf("curves: %s\n", run_dir.path("curves.png").c_str());
      // The others must not read last.safetensors (a resume) while rank 0 is still writing it.
      if (r.distributed) dist::barrier();
    }
    step_profile.finish();
    if (first_epoch >= r.epochs) test = evaluate(*model, *split.test, eval_transform, device, r);
    if (run_dir.enabled()) nn::save_state_dict(*model, run_dir.path("model.safetensors"));
    if (lead) std::printf("test accuracy: %.2f%%\n", 100 * test.accuracy);
    if (lead && show_top5) std::printf("test top-5 accuracy: %.2f%%\n", 100 * test.top5);
    if (r.distributed) dist::destroy_process_group();
    return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Line by line, so that with output piped the header and epoch lines keep their place among the
  // progress lines (stderr is unbuffered).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  apps::Recipe r;
  CLI::App app{"kiln-train: train a ResNet with kiln"};
  apps::add_recipe_flags(app, r);
  if (auto status = apps::parse_command_line(app, "kiln-train", argc, argv)) return *status;
  return apps::run_main("kiln-train", [&] {
    check_momentum_flag(r, app.count("--momentum") > 0);
    return run_training(r);
  });
}
