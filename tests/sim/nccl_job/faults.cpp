// Faults on simulated GPUs: rank 1 is killed (SIGKILL) while the others are in an all-reduce, or
// stays alive and stops calling collectives. The others' nccl group must fail within its timeout,
// end their processes (the default: ProcessGroupOptions::end_process_on_failure) and say which
// rank and which collective; rank 1, when it comes back from its sleep, finds them gone.
#include <signal.h>

#include <chrono>
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

}  // namespace nccl_job
