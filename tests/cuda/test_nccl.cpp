// The nccl backend on one GPU: a group of one rank (NCCL refuses two ranks on one GPU, and the
// GPU check's machine has one). Every collective must leave each rank's tensor as the world-size-1
// reduction says (the same values; the average of one is itself), in order after the work already
// queued on the caller's stream; the point-to-point group (the ring's send and receive to itself)
// must deliver; DistributedDataParallel must give the gradients of the bare model; and an
// operation that never completes must end in a DistError from the watchdog, not a hang, after
// which the group refuses work. Registered only when kiln is built with NCCL
// (tests/CMakeLists.txt).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/dist/ddp.h"
#include "kiln/dist/process_group.h"
#include "kiln/dist/store.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {

const Device kGpu = Device::cuda(0);

std::shared_ptr<dist::ProcessGroup> one_rank_group(const std::string& name,
                                                   std::chrono::milliseconds timeout,
                                                   bool blocking_wait = false) {
  dist::ProcessGroupOptions options;
  options.timeout = timeout;
  // The timeout cases below need the process to go on after the watchdog aborts the
  // communicator (by default a failure ends the process, as PyTorch's does); a blocking wait
  // implies it.
  options.end_process_on_failure = blocking_wait;
  options.blocking_wait = blocking_wait;
  return dist::new_process_group("nccl", dist::make_memory_store(timeout), 0, 1, name, options);
}

// Exact equality, element by element, on the host.
void require_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what << ": got " << describe(got) << ", want " << describe(want));
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(equal(got.cpu(), want.cpu()));
}

}  // namespace

TEST_CASE("nccl, one rank: every collective, in stream order, on f32, bf16 and i64") {
  auto group = one_rank_group("collectives", std::chrono::seconds(60));
  REQUIRE(group->backend() == "nccl");
  REQUIRE(group->size() == 1);
  for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
    INFO(dtype_name(dtype));
    // Values written by a kernel just queued on the caller's stream: a collective that did not
    // wait for it would reduce the old contents (zeros).
    const Tensor values = randint(-100, 100, {1000}, dtype, kGpu);
    for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::max}) {
      Tensor t = zeros({1000}, dtype, kGpu);
      t.copy_(values);
      group->all_reduce(t, op);
      require_equal(t, values, "all_reduce");
    }
    if (dtype != DType::i64) {  // not i64: kiln's gloo backend and ring refuse integer averages
      Tensor t = values.clone();
      group->all_reduce(t, dist::ReduceOp::average);
      require_equal(t, values, "all_reduce average");
    }
    Tensor b = values.clone();
    group->broadcast(b, 0);
    require_equal(b, values, "broadcast");
    std::vector<Tensor> gathered = {zeros({1000}, dtype, kGpu)};
    group->all_gather(gathered, values);
    require_equal(gathered[0], values, "all_gather");
    const Tensor scattered = zeros({1000}, dtype, kGpu);
    group->reduce_scatter(scattered, {values}, dist::ReduceOp::sum);
    require_equal(scattered, values, "reduce_scatter");
  }
  group->barrier();
}

TEST_CASE("nccl, one rank: a send to itself and its receive, in one point-to-point group") {
  auto group = one_rank_group("p2p", std::chrono::seconds(60));
  const Tensor sent = uniform({4099}, -1, 1, DType::f32, kGpu);
  const Tensor received = zeros({4099}, DType::f32, kGpu);
  const uint32_t tag = group->reserve_tags(1);
  group->begin_point_to_point();
  auto send = group->send_async(sent, 0, tag);
  auto recv = group->recv_async(received, 0, tag);
  group->end_point_to_point();
  send->wait();
  recv->wait();
  require_equal(received, sent, "recv");
}

TEST_CASE("nccl, one rank: DDP's gradients are the bare model's") {
  auto group = one_rank_group("ddp", std::chrono::seconds(60));
  const auto make_net = [] {
    manual_seed(7);
    auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(33, 64), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(64, 10)});
    net->to(kGpu);
    return net;
  };
  auto bare = make_net();
  dist::DDPOptions options;
  options.bucket_cap_mb = 0.004;  // a bucket per parameter or two: several all-reduces in flight
  auto ddp = std::make_shared<dist::DistributedDataParallel>(make_net(), group, options);
  const Tensor x = randn({16, 33}, DType::f32, kGpu);
  const Tensor y = randint(0, 10, {16}, DType::i64, kGpu);
  cross_entropy(bare->forward(x), y).backward();
  cross_entropy(ddp->forward(x), y).backward();
  const std::vector<Tensor> want = bare->parameters(), got = ddp->module().parameters();
  REQUIRE(got.size() == want.size());
  // The same kernels on the same inputs; the sum over one rank and the division by 1 are exact.
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("the gradient of parameter " << i);
    REQUIRE(got[i].grad().defined());
    REQUIRE(allclose(got[i].grad().cpu(), want[i].grad().cpu(), 1e-6, 1e-7));
  }
}

// A receive no rank sends to never completes; the watchdog must abort the communicator after the
// group's timeout and turn it into a DistError here, and every later operation must be refused.
// (NCCL may instead refuse the lone receive at once, also a DistError.)
TEST_CASE("nccl, one rank: an operation that never completes ends in a DistError, not a hang") {
  const auto timeout = std::chrono::seconds(2);
  auto group = one_rank_group("timeout", timeout);
  const Tensor never = zeros({16}, DType::f32, kGpu);
  std::string failure;
  const auto deadline = std::chrono::steady_clock::now() + timeout + std::chrono::seconds(30);
  try {
    auto work = group->recv_async(never, 0, group->reserve_tags(1));
    work->wait();
    while (std::chrono::steady_clock::now() < deadline && !work->is_completed())
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } catch (const DistError& e) {
    failure = e.what();
  }
  INFO("the failure: " << failure);
  REQUIRE(!failure.empty());
  CHECK(failure.find("rank 0 of 1") != std::string::npos);
  if (failure.find("did not finish within") != std::string::npos) {
    Tensor t = ones({8}, DType::f32, kGpu);
    CHECK_THROWS_AS(group->all_reduce(t), DistError);
  }
}

// With blocking_wait (PyTorch's TORCH_NCCL_BLOCKING_WAIT=1), wait() returns once the operation has
// finished on the GPU, and a failure is thrown by the wait itself, in this thread, the process
// going on although end_process_on_failure is left true.
TEST_CASE("nccl: a blocking wait on one rank returns finished work and throws a failure") {
  const auto timeout = std::chrono::seconds(2);
  auto group = one_rank_group("blocking", timeout, /*blocking_wait=*/true);
  Tensor t = full({1 << 16}, 3.0, DType::f32, kGpu);
  auto done = group->all_reduce_async(t, dist::ReduceOp::sum);
  done->wait();
  CHECK(done->is_completed());
  require_equal(t, full({1 << 16}, 3.0, DType::f32, kGpu), "the all-reduce of one rank");

  const Tensor never = zeros({16}, DType::f32, kGpu);
  std::string failure;
  const auto start = std::chrono::steady_clock::now();
  try {
    group->recv_async(never, 0, group->reserve_tags(1))->wait();
  } catch (const DistError& e) {
    failure = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("the failure, after " << seconds << " s: " << failure);
  REQUIRE(!failure.empty());
  CHECK(failure.find("rank 0 of 1") != std::string::npos);
  CHECK(seconds < 30);
}
