// CUDA graphs (core/cuda_graph.h): replays of a captured computation with new inputs, the private
// memory pool, the host synchronisations refused during a capture (named, the capture abandoned
// cleanly), and a whole training step of a ResNet-20 (forward, backward, SGD or Adam, the
// GradScaler under autocast f16, a step it skips) replayed bit for bit as the same step run
// eagerly.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/backends.h"
#include "kiln/core/cuda_graph.h"
#include "kiln/core/cuda_simulated.h"
#include "kiln/kiln.h"

using namespace kiln;
using Catch::Matchers::Contains;

namespace {

const Device kGpu = Device::cuda(0);

// cuDNN's deterministic mode for a scope.
struct DeterministicCudnn {
  bool before = backends::cudnn_deterministic();
  DeterministicCudnn() { backends::set_cudnn_deterministic(true); }
  ~DeterministicCudnn() { backends::set_cudnn_deterministic(before); }
  DeterministicCudnn(const DeterministicCudnn&) = delete;
  DeterministicCudnn& operator=(const DeterministicCudnn&) = delete;
};

// A capture needs the caching allocator's private pool (core/cuda_graph.h). With
// KILN_CUDA_CACHING_ALLOCATOR=0, as compute-sanitizer's runs may set it, a case that captures
// says it was skipped and returns, instead of failing a correct program.
bool graphs_need_caching() {
  const char* value = std::getenv("KILN_CUDA_CACHING_ALLOCATOR");
  if (value == nullptr || std::string(value) != "0") return false;
  WARN(
      "SKIPPED: the caching allocator is off (KILN_CUDA_CACHING_ALLOCATOR=0), and a CUDA graph "
      "needs its private pool");
  return true;
}

// The bytes of a tensor, as the host sees them: NaN payloads and signed zeros count.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor host = t.detach().cpu().contiguous();
  const auto* p = static_cast<const unsigned char*>(host.data_ptr());
  return {p, p + host.numel() * static_cast<int64_t>(host.element_size())};
}

Tensor some_input(uint64_t seed, const Shape& shape) {
  Generator generator(seed);
  return randn(shape, DType::f32, Device::cpu(), &generator);
}

// The message of the GraphCaptureError that `work` throws inside a capture, which must leave no
// capture behind: the thread's current stream is the default one again and a capture can begin.
std::string refusal_of(const std::function<void()>& work) {
  cuda::CUDAGraph graph;
  std::string message;
  try {
    graph.capture(work);
  } catch (const GraphCaptureError& e) {
    message = e.what();
  }
  CHECK_FALSE(graph.has_graph());
  CHECK_FALSE(cuda::is_current_stream_capturing());
  CHECK(cuda::current_stream().is_default());
  return message;
}

}  // namespace

TEST_CASE("cuda graphs: a captured computation reruns on new inputs at each replay") {
  if (graphs_need_caching()) return;
  Tensor x = zeros({1000}, DType::f32, kGpu);
  Tensor y;
  cuda::CUDAGraph graph;
  const cuda::SimulatedLaunches before = cuda::simulated_launches();
  graph.capture([&] { y = relu(add(mul(x, 2.0), 1.0)); });
  // The capture ran nothing (on the simulator, where launches are counted).
  if (cuda::is_simulated()) CHECK(cuda::simulated_launches().kernels == before.kernels);
  CHECK(graph.has_graph());
  CHECK(graph.num_nodes() >= 3);
  CHECK(graph.device() == 0);
  for (uint64_t i = 0; i < 3; ++i) {
    const Tensor input = some_input(i, {1000});
    x.copy_(input);
    graph.replay();
    CHECK(bytes_of(y) == bytes_of(relu(add(mul(input, 2.0), 1.0))));
  }
  // A graph captures once; reset() frees it for another capture.
  CHECK_THROWS_AS(graph.capture([] {}), GraphCaptureError);
  graph.reset();
  CHECK_FALSE(graph.has_graph());
  CHECK_THROWS_WITH(graph.replay(), Contains("nothing was captured"));
}

TEST_CASE("cuda graphs: cross_entropy's mean divides by each replay's own count of targets") {
  if (graphs_need_caching()) return;
  // With ignore_index, how many targets count changes from batch to batch: a graph must divide by
  // the count the GPU computes at each replay, not the capture's. A target out of range, which an
  // eager call reports, cannot throw from a graph: the loss becomes NaN.
  Tensor logits = zeros({6, 4}, DType::f32, kGpu);
  Tensor target = zeros({6}, DType::i64, kGpu);
  Tensor loss;
  cuda::CUDAGraph graph;
  graph.capture([&] { loss = cross_entropy(logits, target, Tensor(), /*ignore_index=*/3); });
  const std::vector<std::vector<int64_t>> targets = {
      {0, 1, 2, 3, 3, 3}, {0, 1, 3, 3, 3, 3}, {0, 1, 2, 0, 1, 2}};
  for (size_t i = 0; i < targets.size(); ++i) {
    INFO("replay " << i);
    const Tensor input = some_input(40 + i, {6, 4});
    logits.copy_(input);
    target.copy_(tensor(targets[i]));
    graph.replay();
    const Tensor eager = cross_entropy(input.to(kGpu), tensor(targets[i]).to(kGpu), Tensor(), 3);
    CHECK(bytes_of(loss) == bytes_of(eager));
  }
  target.copy_(tensor(std::vector<int64_t>{0, 1, 2, 9, 0, 1}));
  CHECK_THROWS_AS(cross_entropy(logits, target, Tensor(), 3), IndexError);
  graph.replay();
  CHECK(std::isnan(loss.item()));
}

TEST_CASE("cuda graphs: allocations during a capture come from the graph's private pool") {
  if (graphs_need_caching()) return;
  cuda::synchronize();
  const Tensor x = ones({4096}, DType::f32, kGpu);
  Tensor y;
  void* freed = nullptr;
  void* reused = nullptr;
  cuda::CUDAGraph graph;
  graph.capture([&] {
    {
      Tensor temporary = mul(x, 3.0);
      freed = temporary.data_ptr();
    }
    // Freed during the capture, the block goes back to the pool, and the next request of its size
    // gets it: stream-ordered, as the graph runs them.
    const Tensor again = mul(x, 5.0);
    reused = again.data_ptr();
    y = add(again, 1.0);
  });
  CHECK(reused == freed);
  const cuda::GraphPool pool = graph.pool();
  CHECK(pool.id != 0);
  const cuda::GraphPoolStats stats = cuda::graph_pool_stats(pool);
  CHECK(stats.graphs == 1);
  CHECK(stats.segments >= 1);
  CHECK(stats.reserved_bytes >= stats.allocated_bytes);
  // y is the capture's one block still handed out (x was made before the capture).
  CHECK(stats.allocated_bytes == static_cast<int64_t>(4096 * sizeof(float)));

  // Replays allocate nothing.
  const MemoryStats before = memory_stats(kGpu);
  for (int i = 0; i < 3; ++i) graph.replay();
  const MemoryStats after = memory_stats(kGpu);
  CHECK(after.allocations == before.allocations);
  CHECK(after.reserved_bytes == before.reserved_bytes);
  CHECK(after.device_allocs == before.device_allocs);
  CHECK(bytes_of(y) == bytes_of(full({4096}, 6.0, DType::f32, kGpu)));

  // The graph holds the pool; once it is gone and y too, empty_cache gives the memory back.
  const int64_t reserved = memory_stats(kGpu).reserved_bytes;
  graph.reset();
  CHECK(cuda::graph_pool_stats(pool).graphs == 0);
  cuda::empty_cache();
  CHECK(cuda::graph_pool_stats(pool).segments == stats.segments);  // y still lives in it
  y = Tensor();
  cuda::empty_cache();
  CHECK(cuda::graph_pool_stats(pool).reserved_bytes == 0);
  CHECK(memory_stats(kGpu).reserved_bytes <= reserved - stats.reserved_bytes);
}

TEST_CASE("cuda graphs: two graphs share a pool handle") {
  if (graphs_need_caching()) return;
  const Tensor x = ones({256}, DType::f32, kGpu);
  const cuda::GraphPool shared = cuda::graph_pool_handle();
  cuda::CUDAGraph first, second;
  Tensor a, b;
  first.capture([&] { a = mul(x, 2.0); }, {.pool = shared});
  second.capture([&] { b = mul(a, 3.0); }, {.pool = shared});
  CHECK(first.pool() == shared);
  CHECK(cuda::graph_pool_stats(shared).graphs == 2);
  first.replay();
  second.replay();
  CHECK(bytes_of(b) == bytes_of(full({256}, 6.0, DType::f32, kGpu)));
}

TEST_CASE("cuda graphs: a host synchronisation during a capture is refused, naming the op") {
  if (graphs_need_caching()) return;
  const Tensor x = ones({8}, DType::f32, kGpu);
  const int64_t allocated = memory_stats(kGpu).current_bytes;
  std::string message = refusal_of([&] { (void)mul(x, 2.0).sum().item(); });
  CHECK_THAT(message, Contains("item (in to): copies 4 bytes from cuda:0 to the host"));
  CHECK_THAT(message, Contains("while this thread captures a CUDA graph on cuda:0"));
  // The temporaries of the abandoned capture went back, and no pool is held.
  CHECK(memory_stats(kGpu).current_bytes == allocated);

  CHECK_THAT(refusal_of([&] { (void)x.cpu(); }), Contains("to: copies 32 bytes"));
  CHECK_THAT(refusal_of([&] { (void)x.tolist(); }), Contains("tolist"));
  CHECK_THAT(refusal_of([&] { cuda::synchronize(); }),
             Contains("cuda::synchronize: waits for the whole device"));
  CHECK_THAT(refusal_of([&] { cuda::current_stream().synchronize(); }),
             Contains("cuda::Stream::synchronize"));
  CHECK_THAT(refusal_of([&] {
               (void)tensor({1.0f, 2.0f}).to(kGpu);
             }),
             Contains("from the host to cuda:0"));
  CHECK_THAT(refusal_of([&] {
               (void)nll_loss(log_softmax(ones({2, 3}, DType::f32, kGpu), 1),
                              zeros({2}, DType::i64, kGpu));
             }),
             Contains("nll_loss"));
  CHECK_THAT(refusal_of([&] { cuda::empty_cache(); }), Contains("cuda::empty_cache"));
  // Random numbers would be frozen into the graph.
  CHECK_THAT(refusal_of([&] { (void)dropout(x, 0.5, true); }),
             Contains("dropout: draws random numbers on the GPU"));
  CHECK_THAT(refusal_of([&] { (void)randn({4}, DType::f32, kGpu); }), Contains("randn"));
  CHECK_THAT(refusal_of([&] { (void)rand({4}, DType::f32, kGpu); }), Contains("uniform"));
  // Outside a capture all of them work, dropout in eval mode inside one too.
  CHECK(dropout(x, 0.5, true).numel() == 8);
  cuda::CUDAGraph eval;
  Tensor kept;
  eval.capture([&] { kept = dropout(x, 0.5, false); });
  CHECK(kept.is_same(x));
}

TEST_CASE("cuda graphs: captures do not nest, and capture_end without a capture is an error") {
  if (graphs_need_caching()) return;
  cuda::CUDAGraph outer, inner;
  outer.capture_begin();
  CHECK(cuda::is_current_stream_capturing(0));
  CHECK(outer.capturing());
  CHECK_FALSE(cuda::current_stream().is_default());
  CHECK_THROWS_WITH(inner.capture_begin(), Contains("captures do not nest"));
  CHECK_FALSE(inner.capturing());
  outer.capture_end();
  CHECK_FALSE(outer.capturing());
  CHECK(outer.has_graph());
  CHECK(cuda::current_stream().is_default());
  CHECK_THROWS_WITH(inner.capture_end(), Contains("not capturing"));
  CHECK_THROWS_WITH(cuda::CUDAGraph().capture_begin({.stream = cuda::Stream::default_stream()}),
                    Contains("the default stream cannot capture"));
}

// A convolution whose cuDNN plan (the graph API, KILN_CUDNN_API=v9) or, in benchmark mode, whose
// legacy-API algorithm search (v7) has not been made yet cannot be made inside a capture: kiln's
// cuDNN paths refuse it by name (kernels/cuda/conv2d/), and the simulator's cuDNN stand-in
// refuses it where they would. A warm-up call before the capture makes it, and the graph then
// replays. The legacy API's heuristics only query cuDNN, so a capture may list those.
TEST_CASE("cuda graphs: a convolution's first cuDNN plan is refused inside a capture") {
  if (graphs_need_caching()) return;
  struct Restore {
    backends::CudnnApi api = backends::cudnn_api();
    bool benchmark = backends::cudnn_benchmark();
    ~Restore() {
      backends::set_cudnn_api(api);
      backends::set_cudnn_benchmark(benchmark);
    }
  } restore;
  struct Case {
    backends::CudnnApi api;
    bool benchmark;
    const char* refusal;  // null: the capture builds what it needs
  };
  const char* graph_plan = "a cuDNN graph-API plan built for a problem not seen before";
  const Case cases[] = {
      {backends::CudnnApi::v9, false, graph_plan},
      {backends::CudnnApi::v9, true, graph_plan},
      {backends::CudnnApi::v7, true, "a cuDNN legacy-API algorithm search for a problem not seen"},
      {backends::CudnnApi::v7, false, nullptr}};
  int64_t height = 5;
  for (const Case& c : cases) {
    INFO(backends::cudnn_api_name(c.api) << (c.benchmark ? " in benchmark mode" : ""));
    backends::set_cudnn_api(c.api);
    backends::set_cudnn_benchmark(c.benchmark);
    ++height;  // a problem no call has made yet
    Tensor x = some_input(60, {1, 3, height, 7}).to(kGpu);
    const Tensor w = some_input(61, {4, 3, 3, 3}).to(kGpu);
    Tensor y;
    const auto convolve = [&] { y = conv2d(x, w, Tensor(), {1, 1}, {1, 1}); };
    if (c.refusal != nullptr) {
      CHECK_THAT(refusal_of(convolve),
                 Contains(c.refusal) && Contains("run the step once before capturing it"));
      convolve();  // the warm-up
    }
    cuda::CUDAGraph graph;
    graph.capture(convolve);
    for (uint64_t i = 0; i < 2; ++i) {
      const Tensor input = some_input(70 + i, x.shape());
      x.copy_(input);
      graph.replay();
      CHECK(bytes_of(y) == bytes_of(conv2d(input.to(kGpu), w, Tensor(), {1, 1}, {1, 1})));
    }
  }
}

namespace {

// A CIFAR ResNet (He et al.'s structure: three stages of basic blocks, 1x1-conv shortcuts where
// the shape changes) at a quarter of ResNet-20's width (4, 8 and 16 channels), with `blocks` blocks
// a stage: 3 is ResNet-20, 1 is ResNet-8 (every kind of block once). In the simulator a batch
// norm costs its channels' blocks of 512 threads: at full width a ResNet-20 step takes about 7 s
// of CPU under ASan, at this one 1.7 s. With its optimizer and GradScaler, all capturable, and one
// training step of it.
struct Trainer {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::OneCycleLR> schedule;  // lr and momentum (beta1) change at every step
  optim::GradScaler scaler;
  bool amp;

  // blocks > 0: a CIFAR ResNet of 6 * blocks + 2 layers; 0: a one-layer ViT on 4x4 patches.
  Trainer(int64_t blocks, const std::string& optimizer_name, bool amp_on)
      : scaler({.init_scale = 1024.0, .growth_interval = 1, .enabled = amp_on, .capturable = true}),
        amp(amp_on) {
    manual_seed(7);
    if (blocks == 0)
      model =
          std::make_shared<nn::VisionTransformer>(nn::VisionTransformerOptions{.image_size = 8,
                                                                               .patch_size = 4,
                                                                               .in_channels = 1,
                                                                               .num_classes = 10,
                                                                               .dim = 16,
                                                                               .depth = 1,
                                                                               .heads = 2,
                                                                               .mlp_dim = 32});
    else
      model = std::make_shared<nn::ResNet>(
          "basic", std::vector<int64_t>{blocks, blocks, blocks}, std::vector<int64_t>{4, 8, 16},
          nn::ResNetOptions{.num_classes = 10, .in_channels = 1, .small_input = true});
    model->to(kGpu);
    if (optimizer_name == "sgd")
      optimizer =
          std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.05,
                                                                              .momentum = 0.9,
                                                                              .weight_decay = 5e-4,
                                                                              .nesterov = true,
                                                                              .capturable = true});
    else
      optimizer = std::make_unique<optim::Adam>(
          model->parameters(),
          optim::AdamOptions{.lr = 1e-3, .weight_decay = 1e-4, .capturable = true});
    schedule = std::make_unique<optim::OneCycleLR>(*optimizer, 0.1, 10);
  }

  Tensor step(const Tensor& x, const Tensor& y) {
    Tensor loss;
    {
      autocast mixed(DType::f16, amp);
      loss = cross_entropy(model->forward(x), y);
    }
    optimizer->zero_grad();
    scaler.scale(loss).backward();
    scaler.step(*optimizer);
    scaler.update();
    return loss;
  }

  // Outside the step, as a training loop schedules: a replay reads the new rates on the device.
  void next_lr() { schedule->step(); }

  // Every value the step changes: parameters, batch-norm buffers, optimizer state, the scale.
  std::vector<std::pair<std::string, std::vector<unsigned char>>> state() const {
    std::vector<std::pair<std::string, std::vector<unsigned char>>> out;
    for (const auto& [name, t] : model->named_parameters()) out.emplace_back(name, bytes_of(t));
    for (const auto& [name, t] : model->named_buffers()) out.emplace_back(name, bytes_of(t));
    for (const auto& [name, t] : optimizer->state_dict()) out.emplace_back(name, bytes_of(t));
    for (const auto& [name, t] : scaler.state_dict()) out.emplace_back(name, bytes_of(t));
    return out;
  }
};

std::vector<unsigned char> parameter_bytes(const Trainer& t) {
  std::vector<unsigned char> out;
  for (const Tensor& p : t.model->parameters()) {
    const std::vector<unsigned char> b = bytes_of(p);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

void check_same_state(const Trainer& eager, const Trainer& replayed) {
  const auto a = eager.state(), b = replayed.state();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(a[i].first == b[i].first);
    CHECK(a[i].second == b[i].second);
  }
}

// Two identical trainers: one steps eagerly, the other warms up eagerly, captures its step with
// static inputs and replays it with new ones. After every step both hold the same bytes. With the
// GradScaler (growth after every clean step), replay 0 gets an inf in its images: both skip that
// step (parameters untouched) and halve the scale, which replay 1 doubles again.
void check_replay_matches_eager(int64_t blocks, const std::string& optimizer, bool amp) {
  INFO(optimizer << (amp ? " with autocast f16 and the GradScaler" : " in f32"));
  // Bit for bit asks for cuDNN's deterministic algorithms: others may sum in another order from
  // one run to the next (a weight gradient's atomics), eager or replayed.
  const DeterministicCudnn deterministic;
  constexpr int64_t kBatch = 2, kSide = 8;
  Trainer eager(blocks, optimizer, amp), replayed(blocks, optimizer, amp);
  auto images = [&](uint64_t i) { return some_input(100 + i, {kBatch, 1, kSide, kSide}); };
  auto labels = [&](uint64_t i) {
    Generator generator(200 + i);
    return randint(0, 10, {kBatch}, DType::i64, Device::cpu(), &generator);
  };
  const cuda::Stream side = cuda::Stream::create();
  for (uint64_t i = 0; i < 1; ++i) {
    const Tensor x = images(i).to(kGpu), y = labels(i).to(kGpu);
    eager.step(x, y);
    eager.next_lr();
    {
      const cuda::StreamGuard on_side(side);  // warm up on the capture's stream, as PyTorch does
      replayed.step(x, y);
    }
    // The schedule writes the rates on the device, on the current stream, which the step on
    // `side` reads: without this, the write races the step (the simulator's lazy streams make
    // the race read stale rates every time, docs/simulator.md).
    cuda::current_stream().wait_stream(side);
    replayed.next_lr();
  }
  check_same_state(eager, replayed);

  Tensor static_x = empty({kBatch, 1, kSide, kSide}, DType::f32, kGpu);
  Tensor static_y = empty({kBatch}, DType::i64, kGpu);
  Tensor static_loss;
  cuda::CUDAGraph graph;
  graph.capture([&] { static_loss = replayed.step(static_x, static_y); }, {.stream = side});
  check_same_state(eager, replayed);  // the capture ran nothing

  for (uint64_t i = 1; i < 3; ++i) {
    INFO("replay " << i - 1);
    Tensor x = images(i);
    const bool overflow = amp && i == 1;
    if (overflow) x.data<float>()[5] = std::numeric_limits<float>::infinity();
    const std::vector<unsigned char> before = parameter_bytes(replayed);
    const double scale_before = replayed.scaler.get_scale();
    const Tensor eager_loss = eager.step(x.to(kGpu), labels(i).to(kGpu));
    eager.next_lr();
    static_x.copy_(x);
    static_y.copy_(labels(i));
    graph.replay();
    replayed.next_lr();
    CHECK(bytes_of(static_loss) == bytes_of(eager_loss));
    check_same_state(eager, replayed);
    if (overflow) {
      CHECK(parameter_bytes(replayed) == before);
      CHECK(replayed.scaler.get_scale() == scale_before / 2);
      CHECK(replayed.scaler.found_inf().item() == 1.0);
    } else {
      CHECK(parameter_bytes(replayed) != before);
    }
  }
  // 1024, doubled by the warm-up, halved at replay 0, doubled at replay 1.
  if (amp) CHECK(replayed.scaler.get_scale() == 2048.0);
}

}  // namespace

TEST_CASE(
    "cuda graphs: capturable optimizers and GradScaler take the plain ones' steps on the GPU") {
  if (graphs_need_caching()) return;
  // What the replay test cannot see (a capturable path wrong in eager steps and replays alike):
  // the kernels that read lr, momentum or beta1, the step counts and the scale on the device
  // against the plain ones, bit for bit, through a schedule, an overflow and growth.
  for (const std::string name : {"sgd", "adam"}) {
    INFO(name);
    auto make = [&](bool capturable) {
      manual_seed(11);
      auto model = std::make_shared<nn::Linear>(5, 3);
      model->to(kGpu);
      std::unique_ptr<optim::Optimizer> optimizer;
      if (name == "sgd")
        optimizer = std::make_unique<optim::SGD>(model->parameters(),
                                                 optim::SGDOptions{.lr = 0.1,
                                                                   .momentum = 0.9,
                                                                   .weight_decay = 0.01,
                                                                   .nesterov = true,
                                                                   .capturable = capturable});
      else
        optimizer = std::make_unique<optim::AdamW>(
            model->parameters(), optim::AdamWOptions{.amsgrad = true, .capturable = capturable});
      return std::make_pair(model, std::move(optimizer));
    };
    auto [plain_model, plain] = make(false);
    auto [device_model, on_device] = make(true);
    optim::GradScaler plain_scaler({.init_scale = 512.0, .growth_interval = 2});
    optim::GradScaler device_scaler(
        {.init_scale = 512.0, .growth_interval = 2, .capturable = true});
    optim::OneCycleLR plain_schedule(*plain, 0.2, 10), device_schedule(*on_device, 0.2, 10);
    const Tensor x = some_input(3, {4, 5}).to(kGpu);
    for (int step = 0; step < 6; ++step) {
      INFO("step " << step);
      const bool overflow = step == 2;
      auto run = [&](nn::Linear& model, optim::Optimizer& optimizer, optim::GradScaler& scaler,
                     optim::OneCycleLR& schedule) {
        optimizer.zero_grad();
        Tensor loss = sum(square(model.forward(x)));
        if (overflow) loss = mul(loss, std::numeric_limits<double>::infinity());
        scaler.scale(loss).backward();
        scaler.step(optimizer);
        scaler.update();
        schedule.step();
      };
      run(*plain_model, *plain, plain_scaler, plain_schedule);
      run(*device_model, *on_device, device_scaler, device_schedule);
      CHECK(bytes_of(device_model->weight) == bytes_of(plain_model->weight));
      CHECK(bytes_of(device_model->bias) == bytes_of(plain_model->bias));
      const optim::StateDict a = plain->state_dict(), b = on_device->state_dict();
      REQUIRE(a.size() == b.size());
      for (const auto& [key, t] : a) {
        INFO(key);
        CHECK(bytes_of(b.at(key)) == bytes_of(t));
      }
      CHECK(device_scaler.get_scale() == plain_scaler.get_scale());
      CHECK(device_scaler.growth_tracker() == plain_scaler.growth_tracker());
    }
    CHECK(plain_scaler.get_scale() == 1024.0);  // doubled at steps 1 and 4, halved at step 2
  }
}

TEST_CASE("cuda graphs: a ResNet-20 training step replays bit for bit as the eager step") {
  if (graphs_need_caching()) return;
  check_replay_matches_eager(3, "sgd", true);
  check_replay_matches_eager(3, "adam", false);
}

TEST_CASE("cuda graphs: a ResNet-8 training step replays bit for bit, the other combinations") {
  if (graphs_need_caching()) return;
  check_replay_matches_eager(1, "adam", true);
  check_replay_matches_eager(1, "sgd", false);
}

TEST_CASE("cuda graphs: a ViT training step replays bit for bit as the eager step") {
  if (graphs_need_caching()) return;
  check_replay_matches_eager(0, "adam", true);
  check_replay_matches_eager(0, "sgd", false);
}
