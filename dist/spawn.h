// dist::spawn, as torch.multiprocessing.spawn: a program starts the ranks of its own job on this
// machine, without a launcher.
//
//   int main() {
//     kiln::dist::spawn([](int rank) {
//       kiln::dist::init_process_group("gloo");  // RANK, WORLD_SIZE, MASTER_ADDR... set by spawn
//       ...                                       // train as under kiln-run
//     }, 4);
//   }
//
// Each rank is this program run again (/proc/self/exe, started by fork and execve with an
// argument vector, never through a shell), with this process's arguments unless
// SpawnOptions::args gives others, and the environment kiln-run gives its ranks: RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (= nprocs), MASTER_ADDR, MASTER_PORT (a free port
// unless set), and OMP_NUM_THREADS = cores / nprocs unless it is set. A rank runs main as the
// parent did up to the same spawn call, where spawn runs fn(rank) and ends the process: status 0
// when fn returns, 1 when it throws, the error's type and message sent to the parent through a
// pipe. So the code before the call runs in every rank (as Python's "spawn" start method
// re-imports the main module): call spawn early, and let the arguments lead the ranks to it.
//
// Why not fork alone, which would run fn in a copy of the parent without a second main: the
// child of a fork keeps only the calling thread, and a parent that has run kiln's CPU kernels
// (GNU OpenMP's thread pool, which hangs in a forked child's first parallel region), made a CUDA
// context (which a forked child cannot use) or joined a Gloo group (its threads and sockets) holds
// state the child cannot use. A fresh program has none, whatever the parent did before the call:
// mp.spawn's default start method makes the same choice.
//
// The parent waits for every rank. When one fails (throws, exits with another status, or is
// killed by a signal), the others get SIGTERM, then SIGKILL after grace_seconds, and spawn throws
// a DistError naming the failed rank with its error or exit status (the ranks that failed with it
// are listed after it), as mp.spawn raises ProcessRaisedException or ProcessExitedException.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::dist {

struct SpawnOptions {
  // The ranks' arguments after the program's name; unset: this process's own.
  std::optional<std::vector<std::string>> args = std::nullopt;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a port free on this machine when spawn is called
  // After one rank fails, how long the others get to end on SIGTERM before SIGKILL.
  double grace_seconds = 10;
};

// Runs fn(0), ..., fn(nprocs - 1) in nprocs processes of this program; see above.
void spawn(const std::function<void(int rank)>& fn, int nprocs, SpawnOptions options = {});

// A TCP port of this machine that was free a moment ago (the kernel's pick for port 0).
int free_port();

// This process's environment (NAME=value entries) with `set` replacing any inherited values of
// those names: what spawn and kiln-run give each rank.
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& set);
// execve's argument form of `strings`: pointers into them, then a null.
std::vector<char*> argv_pointers(std::vector<std::string>& strings);

}  // namespace kiln::dist
