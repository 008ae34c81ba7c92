// Faults on simulated GPUs: rank 1 is killed (SIGKILL) while the others are in an all-reduce, or
// stays alive and stops calling collectives. The others' nccl group must fail within its timeout,
// end their processes (the default: ProcessGroupOptions::end_process_on_failure) and say which
// rank and which collective; rank 1, when it comes back from its sleep, finds them gone. With a
// blocking wait (KILN_NCCL_BLOCKING_WAIT=1), the failure is thrown by the wait instead, in the
// caller's thread, and the process goes on.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "job.h"
#include "kiln/dist/process_group.h"
#include "kiln/kiln.h"

namespace nccl_job {

using namespace kiln;

void die_or_hang(bool die) {
  const Tensor t = full({10}, 1.0, DType::f32, gpu());
  dist::all_reduce(t);
  if (dist::get_rank() == 1) {
    if (die) ::raise(SIGKILL);
    // Three timeouts: the others have given up by then.
    std::this_thread::sleep_for(3 * dist::default_group().timeout());
  }
  dist::all_reduce(t);
  throw Error("the all_reduce after rank 1 " + std::string(die ? "died" : "hung") + " returned");
}

// Run with KILN_NCCL_BLOCKING_WAIT=1: rank 1 stops calling collectives, and rank 0's next
// all-reduce throws the watchdog's DistError from its wait, where the caller catches it; the
// process is still running, and the group refuses the next collective with the same reason.
void hang_with_blocking_wait() {
  const Tensor t = full({10}, 1.0, DType::f32, gpu());
  dist::all_reduce(t);
  if (dist::get_rank() == 1) std::this_thread::sleep_for(3 * dist::default_group().timeout());
  std::string first;
  try {
    dist::all_reduce(t);
  } catch (const DistError& e) {
    first = e.what();
  }
  expect(!first.empty(), "the all_reduce without its peer threw");
  std::fprintf(stderr, "the wait threw, in the caller: %s\n", first.c_str());
  std::string second;
  try {
    dist::all_reduce(t);
  } catch (const DistError& e) {
    second = e.what();
  }
  expect(second == first,
         "the next all_reduce is refused with the same reason, got '" + second + "'");
  throw Error("rank " + std::to_string(dist::get_rank()) +
              " went on after the failure, as a blocking wait lets it");
}

}  // namespace nccl_job
