// One rank of a real multi-process job, for tests/dist/run_jobs.py, which starts it under kiln-run
// or mpirun. The scenario is the first argument:
//   collectives  every collective and the ring against their expected values; DDP training steps
//                whose parameters every rank must end with identically
//   die          rank 1 kills itself (SIGKILL) before the second all-reduce; the others are in it
//   hang         rank 1 sleeps instead of joining an all-reduce; the others must time out
//   different-models  rank r wraps Linear(8, 3 + r) in DDP, which must refuse it on every rank
// It prints "rank R of N: ok" on success; any failure is one line on stderr and exit status 1.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/dist/ddp.h"
#include "kiln/dist/process_group.h"
#include "kiln/dist/ring.h"
#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

namespace {

void expect(bool ok, const std::string& what) {
  if (!ok) throw Error("check failed: " + what);
}

void collectives() {
  const int rank = dist::get_rank(), n = dist::get_world_size();
  Tensor t = full({1000}, rank + 1.0, DType::f64);
  dist::all_reduce(t);
  expect(equal(t, full({1000}, n * (n + 1) / 2.0, DType::f64)), "all_reduce sum");
  Tensor m = full({7}, static_cast<double>(rank), DType::f32);
  dist::all_reduce(m, dist::ReduceOp::max);
  expect(equal(m, full({7}, n - 1.0)), "all_reduce max");
  Tensor b = full({5}, static_cast<double>(rank), DType::i64);
  dist::broadcast(b, n - 1);
  expect(equal(b, full({5}, n - 1.0, DType::i64)), "broadcast");
  std::vector<Tensor> parts(n);
  for (Tensor& p : parts) p = empty({2}, DType::f32);
  dist::all_gather(parts, full({2}, static_cast<double>(rank)));
  for (int r = 0; r < n; ++r)
    expect(equal(parts[r], full({2}, static_cast<double>(r))), "all_gather");
  Tensor ring = full({100001}, rank + 1.0, DType::f32);
  dist::ring_all_reduce(dist::default_group(), ring, dist::ReduceOp::average);
  expect(equal(ring, full({100001}, (n + 1) / 2.0)), "ring all-reduce average");
  dist::barrier();

  // DDP: ranks start from different weights and see different data; they must end identical.
  manual_seed(10 + rank);
  auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(8, 3)});
  auto ddp = std::make_shared<dist::DistributedDataParallel>(net);
  optim::SGD opt(ddp->parameters(), {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    Generator gen(100 * rank + step);
    const Tensor x = randn({4, 6}, DType::f32, Device::cpu(), &gen);
    const Tensor y = randint(0, 3, {4}, DType::i64, Device::cpu(), &gen);
    opt.zero_grad();
    cross_entropy(ddp->forward(x), y).backward();
    opt.step();
  }
  for (const Tensor& p : ddp->parameters()) {
    Tensor first = p.detach().clone();
    dist::broadcast(first, 0);
    expect(equal(first, p.detach()), "DDP parameters identical on every rank");
  }
}

void die_or_hang(bool die) {
  const int rank = dist::get_rank();
  Tensor t = full({10}, 1.0);
  dist::all_reduce(t);
  if (rank == 1) {
    if (die) ::raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return;
  }
  dist::all_reduce(t);  // rank 1 never joins: this must fail, not wait forever
  throw Error("the all_reduce without rank 1 returned");
}

int run(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  dist::ProcessGroupOptions options;
  if (scenario == "hang") options.timeout = std::chrono::seconds(3);
  dist::init_process_group("gloo", options);
  if (scenario == "collectives")
    collectives();
  else if (scenario == "die" || scenario == "hang")
    die_or_hang(scenario == "die");
  else if (scenario == "different-models")
    dist::DistributedDataParallel(std::make_shared<nn::Linear>(8, 3 + dist::get_rank()));
  else
    throw ValueError("unknown scenario '" + scenario +
                     "': expected collectives, die, hang or different-models");
  std::printf("rank %d of %d: ok\n", dist::get_rank(), dist::get_world_size());
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::apps::run_main("dist_job", [&] { return run(argc, argv); });
}
