// nccl_job: one rank of a job on simulated GPUs through kiln's nccl backend (tests/sim/
// run_nccl_job.py starts every rank with kiln-run's environment). The scenario is the first
// argument, a scratch folder shared by the ranks the second:
//   collectives    every collective on every dtype, and point-to-point messages of 0 elements up
//   ring           kiln's ring over NCCL point-to-point against the all-reduce
//   ddp            DDP over nccl against one simulated GPU and against gloo on the CPU
//   no_sync        gradient accumulation under DDP
//   comm_hooks     DDP's fp16 and bf16 compression hooks
//   sync_bn        SyncBatchNorm on CUDA tensors against BatchNorm over the global batch
//   grad_scaler    the GradScaler under DDP, with an overflow on one rank
//   die, hang      rank 1 is killed, or stops calling collectives (timeout 3 s)
//   hang_blocking  hang, run with KILN_NCCL_BLOCKING_WAIT=1: the failure is thrown by the wait
// It prints "rank R of N: ok" and checks that it took no memory and made no CUDA context on
// another device; a failure is one line on stderr and exit status 1.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "job.h"
#include "kiln/core/cuda.h"
#include "kiln/dist/process_group.h"
#include "kiln/kiln.h"
#include "kiln/sim/runtime/state.h"
#include "main_guard.h"

namespace {

using namespace kiln;

// The review's device bugs (2026-11-25, A2 and A3) left a context on cuda:0 in every rank: its
// watchdog thread queried events without choosing a device, and guards restored device 0. The
// simulator records the contexts CUDA would make (kiln/sim/runtime/state.h).
void expect_only_own_device() {
  const int mine = cuda::current_device();
  for (int d = 0; d < cuda::device_count(); ++d) {
    if (d == mine) continue;
    const std::string where =
        " on cuda:" + std::to_string(d) + " by the rank on cuda:" + std::to_string(mine);
    nccl_job::expect(cuda::memory_reserved(d) == 0, "no memory taken" + where);
    nccl_job::expect(!kiln::sim::runtime::has_context(d), "no CUDA context made" + where);
  }
}

int run(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  const std::string scratch = argc > 2 ? argv[2] : "";
  dist::ProcessGroupOptions options;
  const bool fault = scenario == "die" || scenario == "hang" || scenario == "hang_blocking";
  options.timeout = std::chrono::seconds(fault ? 3 : 60);
  dist::init_process_group("nccl", options);
  if (scenario == "collectives")
    nccl_job::collectives();
  else if (scenario == "ring")
    nccl_job::ring();
  else if (scenario == "ddp")
    nccl_job::ddp(scratch);
  else if (scenario == "no_sync")
    nccl_job::no_sync();
  else if (scenario == "comm_hooks")
    nccl_job::comm_hooks();
  else if (scenario == "sync_bn")
    nccl_job::sync_batch_norm();
  else if (scenario == "grad_scaler")
    nccl_job::grad_scaler();
  else if (scenario == "die" || scenario == "hang")
    nccl_job::die_or_hang(scenario == "die");
  else if (scenario == "hang_blocking")
    nccl_job::hang_with_blocking_wait();
  else
    throw ValueError("unknown scenario '" + scenario +
                     "': expected collectives, ring, ddp, no_sync, comm_hooks, sync_bn, "
                     "grad_scaler, die, hang or hang_blocking");
  // The nccl group's watchdog polls every 100 ms: two polls over the last operations' events
  // before checking which devices this process touched.
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  expect_only_own_device();
  std::printf("rank %d of %d: ok\n", dist::get_rank(), dist::get_world_size());
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::apps::run_main("nccl_job", [&] { return run(argc, argv); });
}
